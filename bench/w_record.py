"""Producer transactions: ``record()`` beside the same bytes into a plain table.

Each workload opens a connection the way an application does (DB-API defaults, an
implicit transaction) and commits ``n`` producer transactions. The plain variant
inserts the business row plus the key, job name, queue and JSON payload into a table
with no constraints beyond its primary key: the floor for writing the same bytes.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from bench.data import JOB_NAME, QUEUE, clear, connect, payload

SERIAL = {
    "postgresql": "bigserial PRIMARY KEY",
    "mysql": "BIGINT AUTO_INCREMENT PRIMARY KEY",
    "sqlite": "INTEGER PRIMARY KEY",
}
MODES = (
    "plain",
    "byhand",
    "onerow",
    "record",
    "record_notify",
    "raw_single",
    "byhand_single",
    "record_single",
    "record_batch",
    "record_batch_1000",
    "byhand_batch_1000",
    "push_batch_1000",
)
BATCH = 100
# A by-hand batch row's columns after the payload: max_attempts, available_at,
# priority, trace_context, ordering_key (record_many's row layout).
_NULLS = (None, None, 0, None, None)
# Calls that write many intents or jobs at once, and how many each.
PER_CALL = {
    "record_batch": BATCH,
    "record_batch_1000": 1_000,
    "byhand_batch_1000": 1_000,
    "push_batch_1000": 1_000,
}


def prepare(url: str) -> None:
    """Fresh outbox tables plus the business and plain tables."""
    conn = connect(url)
    d = conn.dialect.name
    # TRUNCATE, not DELETE: with autovacuum off (as on these machines) deleted rows
    # would pile up in our tables' indexes while the plain table starts fresh each time.
    clear(conn)
    for table in ("bench_business", "bench_plain", "bench_onerow"):
        conn.execute_sql(f"DROP TABLE IF EXISTS {table}")
    conn.execute_sql(
        f"CREATE TABLE bench_business (id {SERIAL[d]}, note_id BIGINT NOT NULL, "
        "title VARCHAR(200) NOT NULL, updated_at BIGINT NOT NULL)"
    )
    conn.execute_sql(
        f"CREATE TABLE bench_plain (id {SERIAL[d]}, message_id VARCHAR(36) NOT NULL, "
        "idem_key VARCHAR(200) NOT NULL, job_name VARCHAR(200) NOT NULL, "
        "queue VARCHAR(200) NOT NULL, payload TEXT NOT NULL, created_at BIGINT NOT NULL)"
    )
    for sql in _one_row_table(conn, d):
        conn.execute_sql(sql)
    conn.close()


def _one_row_table(conn: Any, dialect: str) -> list[str]:
    """The one-row sketch's table: ``outbox_messages`` as it is (columns and indexes),
    plus a unique index on ``key_digest``, which would hold the idempotency memory on
    the intent itself instead of in ``outbox_keys``. Bench only; no product schema."""
    unique = "CREATE UNIQUE INDEX bench_onerow_key ON bench_onerow (key_digest)"
    if dialect == "postgresql":
        return ["CREATE TABLE bench_onerow (LIKE outbox_messages INCLUDING ALL)", unique]
    if dialect == "mysql":
        return ["CREATE TABLE bench_onerow LIKE outbox_messages", unique]
    rows = conn.execute_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'outbox_messages' "
        "AND sql IS NOT NULL ORDER BY type DESC"
    )
    out = []
    for kind, name, sql in rows:
        sql = str(sql).replace("outbox_messages", "bench_onerow", 1 if kind == "table" else 2)
        if kind == "index":
            sql = sql.replace(str(name), "bench_onerow_" + str(name), 1)
        out.append(sql)
    return [*out, unique]


def _now_ms(dialect: str) -> str:
    from outbox.db.dialect import dialect_named

    return dialect_named(dialect).now_ms


def app_connect(url: str) -> tuple[Any, str]:
    """A connection as an application opens it: implicit transactions, driver defaults."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    scheme = u.drivername.split("+", 1)[0]
    if scheme == "sqlite":
        return sqlite3.connect(u.database or ":memory:"), "sqlite"
    if scheme.startswith("postgres"):
        import psycopg

        return psycopg.connect(url), "postgresql"
    import pymysql

    return pymysql.connect(
        host=u.host,
        port=u.port or 3306,
        user=u.username,
        password=u.password or "",
        database=u.database,
        charset="utf8mb4",
    ), "mysql"


def _by_hand_sql(dialect: str, mark: str) -> list[str]:
    """record()'s rows written by hand (key row, then intent with ``keyed = 1``): the
    schema's cost without our Python work. One statement on PostgreSQL, as record()."""
    now = _now_ms(dialect)
    intent = (
        "outbox_messages (message_id, key_digest, fingerprint, job_name, queue, payload, "
        "max_attempts, available_at, state, created_at, keyed)"
    )
    if dialect == "postgresql":
        return [
            "WITH k AS (INSERT INTO outbox_keys (key_digest, message_id, fingerprint, "
            f"created_at) VALUES ({mark}, {mark}, {mark}, {now}) ON CONFLICT (key_digest) "
            "DO NOTHING RETURNING key_digest, message_id, fingerprint, created_at) "
            f"INSERT INTO {intent} SELECT k.message_id, k.key_digest, k.fingerprint, "
            f"{mark}, {mark}, {mark}, NULL, NULL, 'pending', k.created_at, 1 FROM k "
            "RETURNING message_id"
        ]
    conflict = (
        " ON DUPLICATE KEY UPDATE key_digest = key_digest"
        if dialect == "mysql"
        else " ON CONFLICT (key_digest) DO NOTHING"
    )
    return [
        "INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at) "
        f"VALUES ({mark}, {mark}, {mark}, {now})" + conflict,
        f"INSERT INTO {intent} VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}, "
        f"NULL, NULL, 'pending', {now}, 1)",
    ]


def _one_row_sql(dialect: str, mark: str) -> str:
    """What a one-row design would send per ``record()``: the intent with its key on
    the row, one INSERT against the unique ``key_digest``, no ``outbox_keys`` row."""
    cols = (
        "bench_onerow (message_id, key_digest, fingerprint, job_name, queue, payload, "
        "max_attempts, available_at, state, created_at, keyed)"
    )
    values = (
        f"VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}, NULL, NULL, 'pending', "
        f"{_now_ms(dialect)}, 1)"
    )
    if dialect == "mysql":
        return f"INSERT INTO {cols} {values} ON DUPLICATE KEY UPDATE key_digest = key_digest"
    returning = " RETURNING message_id" if dialect == "postgresql" else ""
    return f"INSERT INTO {cols} {values} ON CONFLICT (key_digest) DO NOTHING{returning}"


def producer(url: str, n: int, mode: str, tag: str, src: str = "") -> Callable[[], dict[str, Any]]:
    """``n`` producer transactions in ``mode``; the count is of intents written.

    ``src``, when given, is a folder holding another ``outbox`` package (a snapshot of
    an earlier commit, ``bench.s_record.snapshot``), imported instead of this one so
    both are timed in one run; the bench's own imports of outbox wait until here."""
    if src:
        import sys

        sys.path.insert(0, src)
        for name in [m for m in sys.modules if m == "outbox" or m.startswith("outbox.")]:
            del sys.modules[name]
    from outbox import Job, push_many, record, record_many
    from outbox.config import configure

    configure(notify=mode == "record_notify")
    conn, d = app_connect(url)
    mark = "?" if d == "sqlite" else "%s"
    business = (
        f"INSERT INTO bench_business (note_id, title, updated_at) "
        f"VALUES ({mark}, {mark}, {_now_ms(d)})"
    )
    plain = (
        f"INSERT INTO bench_plain (message_id, idem_key, job_name, queue, payload, "
        f"created_at) VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {_now_ms(d)})"
    )
    one_row = _one_row_sql(d, mark)

    by_hand = _by_hand_sql(d, mark)

    def one(cur: Any, i: int) -> None:
        if mode in ("plain", "raw_single"):
            body = orjson.dumps(payload(i), option=orjson.OPT_SORT_KEYS).decode()
            cur.execute(plain, (str(uuid.uuid4()), f"bench:{tag}:{i}", JOB_NAME, QUEUE, body))
        elif mode in ("byhand", "byhand_single"):
            body = orjson.dumps(payload(i), option=orjson.OPT_SORT_KEYS).decode()
            digest = hashlib.sha256(f"bench:{tag}:{i}".encode()).hexdigest()
            mid = str(uuid.uuid4())
            if len(by_hand) == 1:
                cur.execute(by_hand[0], (digest, mid, digest, JOB_NAME, QUEUE, body))
                cur.fetchall()
            else:
                cur.execute(by_hand[0], (digest, mid, digest))
                cur.execute(by_hand[1], (mid, digest, digest, JOB_NAME, QUEUE, body))
        elif mode == "onerow":
            body = orjson.dumps(payload(i), option=orjson.OPT_SORT_KEYS).decode()
            digest = hashlib.sha256(f"bench:{tag}:{i}".encode()).hexdigest()
            cur.execute(one_row, (str(uuid.uuid4()), digest, digest, JOB_NAME, QUEUE, body))
            if d == "postgresql":
                cur.fetchall()
        else:
            record(conn, f"bench:{tag}:{i}", Job(JOB_NAME, payload(i), queue=QUEUE))

    per_txn = PER_CALL.get(mode, 1)

    def by_hand_batch(span: range) -> None:
        """``record_many``'s own statement(s), on rows built by hand as ``byhand`` builds
        its one (a uuid4, one digest for key and fingerprint): the floor of the batch
        call without outbox's Python (validation, digests, ids), driven as
        ``record_many`` drives it."""
        from outbox.db.adapters import adapt
        from outbox.db.caller import IntentsInsert, intents_insert, run

        rows = []
        for i in span:
            body = orjson.dumps(payload(i), option=orjson.OPT_SORT_KEYS).decode()
            digest = hashlib.sha256(f"bench:{tag}:{i}".encode()).hexdigest()
            rows.append((str(uuid.uuid4()), digest, digest, JOB_NAME, QUEUE, body, *_NULLS))
        target = adapt(conn)
        fingerprints = {r[1]: r[2] for r in rows}
        run(intents_insert(IntentsInsert(rows, False), fingerprints, target.dialect), target, "")

    def batch(first: int) -> None:
        """Batch recording (``record_many``) or keyless pushing (``push_many``): one call
        of ``per_txn`` per transaction, the jobs built inside the timed loop as an
        application builds them."""
        span = range(first, first + per_txn)
        if mode == "byhand_batch_1000":
            by_hand_batch(span)
            return
        if mode.startswith("push"):
            push_many(conn, [Job(JOB_NAME, payload(i), queue=QUEUE) for i in span])
            return
        record_many(
            conn, [(f"bench:{tag}:{i}", Job(JOB_NAME, payload(i), queue=QUEUE)) for i in span]
        )

    def work() -> dict[str, Any]:
        cur = conn.cursor()
        for t in range(n // per_txn):
            if mode in ("plain", "byhand", "onerow", "record", "record_notify"):
                cur.execute(business, (t, f"note {t}"))
            if mode in PER_CALL:
                batch(t * per_txn)
            else:
                for k in range(per_txn):
                    one(cur, t * per_txn + k)
            conn.commit()
        cur.close()
        conn.close()
        return {"count": (n // per_txn) * per_txn}

    return work
