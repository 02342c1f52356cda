"""Workload data: ~200-byte payloads, and bulk preloading of intents and queued jobs.

Preloading goes straight into the tables (COPY on PostgreSQL, executemany elsewhere):
it is set-up, not what is measured. Intents are built with the product's own
normalisation and fingerprint, so the relay verifies them exactly as it would real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

JOB_NAME = "bench.noop"
QUEUE = "bench"
_FILLER = "x" * 120
_TABLES = ("outbox_jobs", "outbox_messages", "outbox_failed_jobs")


def payload(i: int) -> dict[str, Any]:
    """About 200 bytes of JSON once encoded."""
    return {"note_id": i, "user": f"u-{i % 9973:06d}", "action": "index", "text": _FILLER}


def connect(url: str, migrate: bool = True) -> Any:
    """An internal outbox ``Connection`` on ``url``, migrated."""
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate as run_migrations

    conn = Database(url).connect()
    if migrate:
        run_migrations(conn)
    return conn


def clear(conn: Any) -> None:
    """Empty the outbox tables (TRUNCATE where it exists: no dead rows left behind)."""
    for table in _TABLES:
        if conn.dialect.name == "sqlite":
            conn.execute_sql(f"DELETE FROM {table}")
        else:
            conn.execute_sql(f"TRUNCATE TABLE {table}")


def intent_rows(start: int, count: int, tag: str) -> Iterator[tuple[Any, ...]]:
    from outbox.job import Job
    from outbox.record import Intent

    for i in range(start, start + count):
        it = Intent.build(f"bench:{tag}:{i}", Job(JOB_NAME, payload(i), queue=QUEUE), 0)
        yield (
            it.message_id,
            it.key_digest,
            it.fingerprint,
            it.job_name,
            it.queue,
            it.payload,
            it.max_attempts,
            it.available_at,
            "pending",
            0,
        )


def job_rows(start: int, count: int, available_at: int = 0) -> Iterator[tuple[Any, ...]]:
    from outbox.ids import new_message_id
    from outbox.job import Job, normalise

    body = normalise(Job(JOB_NAME, payload(0), queue=QUEUE)).payload_json
    for _ in range(start, start + count):
        yield (new_message_id(), QUEUE, JOB_NAME, body, 0, None, available_at, 0)


INTENT_COLUMNS = (
    "message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts, "
    "available_at, state, created_at"
)
JOB_COLUMNS = (
    "message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at"
)


def load(conn: Any, table: str, columns: str, rows: Iterator[tuple[Any, ...]]) -> None:
    """Bulk-insert ``rows`` into ``table`` (set-up only; never measured)."""
    raw = conn.raw
    if conn.dialect.name == "postgresql":
        with raw.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    marks = ", ".join(["%s" if conn.dialect.name == "mysql" else "?"] * len(columns.split(",")))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
    batch: list[tuple[Any, ...]] = []
    cur = raw.cursor()
    try:
        if conn.dialect.name == "sqlite":
            raw.execute("BEGIN")
        for row in rows:
            batch.append(row)
            if len(batch) >= 5_000:
                cur.executemany(sql, batch)
                batch.clear()
        if batch:
            cur.executemany(sql, batch)
        if conn.dialect.name == "sqlite":
            raw.execute("COMMIT")
    finally:
        cur.close()


def load_intents(conn: Any, count: int, tag: str, start: int = 0) -> None:
    load(conn, "outbox_messages", INTENT_COLUMNS, intent_rows(start, count, tag))


def load_jobs(conn: Any, count: int, available_at: int = 0) -> None:
    load(conn, "outbox_jobs", JOB_COLUMNS, job_rows(0, count, available_at))


def analyze(conn: Any) -> None:
    """Fresh statistics so the planner sees the table as it is now."""
    if conn.dialect.name == "postgresql":
        conn.execute_sql("ANALYZE outbox_jobs")
        conn.execute_sql("ANALYZE outbox_messages")
    elif conn.dialect.name == "sqlite":
        conn.execute_sql("ANALYZE")
    else:
        conn.execute_sql("ANALYZE TABLE outbox_jobs, outbox_messages")
