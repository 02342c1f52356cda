"""Helpers for the record()/push()/migrate tests: row counts, a business table, SQL
recomputation of the fingerprint, and producer processes that race on real rows.

The producer functions run in child processes started with ``multiprocessing`` (spawn),
so they live here, importable by name, and take only picklable arguments.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from multiprocessing.connection import Connection as Pipe
from typing import Any

from outbox import Job, record
from outbox.db.connection import Connection
from outbox.errors import IdempotencyConflict, RetryTransaction
from tests.fixtures.databases import (
    backend_of,
    db_now_ms,  # noqa: F401 - part of this module's vocabulary
    placeholder,
    raw_connect,
)
from tests.fixtures.factories import count_rows

OUTBOX_TABLES = ("outbox_messages", "outbox_jobs", "outbox_failed_jobs")
TABLES = (*OUTBOX_TABLES, "notes")

# The fingerprint layout of outbox.job, recomputed by each database from the stored row.
FINGERPRINT_SQL = {
    "postgresql": (
        "SELECT encode(sha256(convert_to(concat_ws(E'\\n', 'v1', job_name, queue,"
        " coalesce(max_attempts::text, ''), coalesce(available_at::text, ''), payload),"
        " 'UTF8')), 'hex'), fingerprint FROM outbox_messages"
    ),
    "mysql": (
        "SELECT SHA2(CONCAT_WS('\\n', 'v1', job_name, queue, COALESCE(max_attempts, ''),"
        " COALESCE(available_at, ''), payload), 256), fingerprint FROM outbox_messages"
    ),
    "sqlite": (
        "SELECT outbox_sha256('v1' || char(10) || job_name || char(10) || queue || char(10)"
        " || coalesce(max_attempts, '') || char(10) || coalesce(available_at, '') || char(10)"
        " || payload), fingerprint FROM outbox_messages"
    ),
}



def create_notes(conn: Connection) -> None:
    """The application's own table, written in the same transaction as the intent."""
    conn.execute_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, title VARCHAR(100))")


def insert_note(app_conn: Any, backend: str, note_id: int, title: str = "t") -> None:
    """A business write through the application's connection, in its transaction."""
    p = placeholder(backend)
    cur = app_conn.cursor()
    try:
        cur.execute(f"INSERT INTO notes (id, title) VALUES ({p}, {p})", (note_id, title))
    finally:
        cur.close()


def counts(conn: Connection, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Rows per table, read by our own connection (committed data only)."""
    return {t: count_rows(conn, t) for t in tables}


def message_rows(conn: Connection) -> list[dict[str, Any]]:
    cols = (
        "message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,"
        " available_at, state, created_at, published_at, failed_at, failure_reason"
    )
    names = [c.strip() for c in cols.split(",")]
    rows = conn.execute_sql(f"SELECT {cols} FROM outbox_messages ORDER BY id")
    return [dict(zip(names, row, strict=True)) for row in rows]



def outcome(call: Callable[[], str]) -> tuple[str, str | None, str]:
    """``("ok", id, "")``, ``("conflict", winner id, msg)``, ``("retry", None, msg)`` or
    ``("error", None, "Class: msg")`` -- picklable, for results from child processes."""
    try:
        return ("ok", call(), "")
    except IdempotencyConflict as exc:
        return ("conflict", exc.message_id, str(exc))
    except RetryTransaction as exc:
        return ("retry", None, str(exc))
    except Exception as exc:
        return ("error", None, f"{type(exc).__name__}: {exc}")


def _begin(conn: Any, backend: str) -> None:
    """Open a transaction and read in it, as an application does before it writes."""
    if backend == "mysql":
        conn.begin()
    elif backend == "sqlite":
        conn.execute("BEGIN")
    if backend != "sqlite":  # a read would pin an SQLite snapshot: see the race tests
        _read(conn)


def _read(conn: Any) -> None:
    cur = conn.cursor()
    try:
        cur.execute("SELECT count(*) FROM outbox_messages")
        cur.fetchall()
    finally:
        cur.close()


def session_id(conn: Any, backend: str) -> int:
    sql = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}
    if backend not in sql:
        return 0
    cur = conn.cursor()
    try:
        cur.execute(sql[backend])
        return int(cur.fetchall()[0][0])
    finally:
        cur.close()
        conn.rollback()  # the read opened a transaction; the tests open their own


def producer_child(db_url: str, pipe: Pipe) -> None:
    """A producer process driven step by step by the test: begin, record, commit..."""
    backend = backend_of(db_url)
    conn = raw_connect(db_url)
    try:
        while True:
            cmd, *args = pipe.recv()
            if cmd == "stop":
                return
            pipe.send(_step(conn, backend, cmd, args))
    finally:
        conn.close()


def _step(conn: Any, backend: str, cmd: str, args: list[Any]) -> Any:
    if cmd == "pid":
        return session_id(conn, backend)
    if cmd == "begin":
        return outcome(lambda: str(_begin(conn, backend)))
    if cmd == "read":
        return outcome(lambda: str(_read(conn)))
    if cmd == "repeatable_read":  # psycopg only; args[0] False restores the default
        import psycopg

        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ if args[0] else None
        return ("ok", None, "")
    if cmd == "record":
        key, payload = args
        return outcome(lambda: record(conn, key, Job("race.job", payload)))
    if cmd == "note":
        return outcome(lambda: str(insert_note(conn, backend, args[0])))
    if cmd == "commit":
        return outcome(lambda: str(conn.commit()))
    if cmd == "rollback":
        return outcome(lambda: str(conn.rollback()))
    raise ValueError(cmd)


def racing_child(db_url: str, who: int, rounds: int, barrier: Any, pipe: Pipe) -> None:
    """Record one key per round at the same instant as the other producer.

    Odd rounds use the same job in both processes, even rounds a different payload. A
    ``RetryTransaction`` is handled as the README says: roll back, run it all again.
    """
    backend = backend_of(db_url)
    conn = raw_connect(db_url)
    results = []
    try:
        for n in range(rounds):
            payload = {"n": n} if n % 2 else {"n": n, "who": who}
            retries = 0
            while True:
                _begin(conn, backend)
                if retries == 0:
                    barrier.wait(timeout=60)
                job = Job("race.job", payload)
                result = outcome(lambda: record(conn, f"race:{n}", job))  # noqa: B023
                if result[0] == "ok":
                    insert_note(conn, backend, n * 10 + who)
                    time.sleep(random.uniform(0, 0.01))
                    conn.commit()
                else:
                    conn.rollback()
                if result[0] != "retry" or retries == 3:
                    break
                retries += 1
            results.append((n, retries, *result))
    except Exception as exc:
        results.append((-1, 0, "error", None, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
        pipe.send(results)


def migrate_child(db_url: str, barrier: Any, pipe: Pipe) -> None:
    """One of several processes that run ``migrate`` against one database at once."""
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate

    try:
        database = Database(db_url)
        barrier.wait(timeout=60)
        with database.connect() as conn:
            pipe.send(("ok", migrate(conn)))
    except Exception as exc:
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
