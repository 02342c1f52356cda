"""Helpers for the relay's tests (measurements live in ``bench/``)."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import time
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import capture_logs

from outbox import Job, record
from outbox.db.connection import Connection, Database
from outbox.errors import RetryTransaction
from outbox.ids import new_message_id
from outbox.relay import Relay, RelayConfig
from tests.fixtures.databases import (
    db_now_ms,  # noqa: F401 - part of this module's vocabulary
    placeholder,
    raw_connect,
)

MARKER = "PAYLOAD-MARKER-7c1e"


@contextmanager
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Capture every structlog event, at every level, whatever ran in this process before.

    ``capture_logs`` swaps only the processors. The level filter (``wrapper_class``) that
    ``outbox.log.configure`` installs, e.g. through an earlier in-process CLI run, stays
    and would silently drop debug (at ``info``) or info and warning events (at ``error``),
    so the filter is opened for the duration and restored after.
    """
    saved = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.NOTSET))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(wrapper_class=saved)



def record_many(
    url: str, keys: Sequence[str], *, available_at: float = 0, commit: bool = True
) -> list[str]:
    """Record one intent per key in one application transaction; commit or roll back."""
    app = raw_connect(url)
    try:
        ids = [
            record(
                app,
                key,
                Job("tests.echo", {"key": key, "note": MARKER}, queue="q1"),
                available_at=available_at,
            )
            for key in keys
        ]
        if commit:
            app.commit()
        else:
            app.rollback()
        return ids
    finally:
        app.close()


def set_column(conn: Connection, message_id: str, column: str, value: Any) -> None:
    """Corrupt (or repair) one column of one outbox row, as an operator's UPDATE would."""
    ph = placeholder(conn)
    conn.execute_sql(
        f"UPDATE outbox_messages SET {column} = {ph} WHERE message_id = {ph}", (value, message_id)
    )


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def outbox_rows(conn: Connection) -> dict[str, tuple[Any, ...]]:
    """message_id → (state, failure_reason, payload is NULL) of every intent recorded;
    one handed off (its outbox row gone, its key row left) is ``("handed_off", None, True)``."""
    rows = conn.execute_sql(
        "SELECT message_id, state, failure_reason, payload FROM outbox_messages"
    )
    out = {r[0]: (r[1], r[2], r[3] is None) for r in rows}
    for (message_id,) in conn.execute_sql("SELECT message_id FROM outbox_keys"):
        out.setdefault(message_id, ("handed_off", None, True))
    return out


def plant_corruptions(conn: Connection, db_url: str) -> dict[str, str]:
    """Plant one corruption of each kind; return message id → expected reason."""
    ids = record_many(db_url, [f"bad{i}" for i in range(7)])
    payload_fp = sha256_hex("v1\ntests.echo\nq1\n\n\n{not json")
    set_column(conn, ids[0], "payload", "{not json")
    set_column(conn, ids[1], "payload", '{"key":"bad1","note":"changed"}')
    set_column(conn, ids[2], "job_name", "tests.other")
    set_column(conn, ids[3], "job_name", "bad name!")
    set_column(conn, ids[4], "fingerprint", "0" * 64)
    set_column(conn, ids[5], "queue", "q 2")
    set_column(conn, ids[6], "payload", "{not json")
    set_column(conn, ids[6], "fingerprint", payload_fp)  # re-sealed, still not JSON
    return {
        ids[0]: "invalid_json",
        ids[1]: "fingerprint_mismatch",
        ids[2]: "fingerprint_mismatch",
        ids[3]: "invalid_name",
        ids[4]: "fingerprint_mismatch",
        ids[5]: "invalid_queue",
        ids[6]: "invalid_json",
    }


def queued_ids(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute_sql("SELECT message_id FROM outbox_jobs ORDER BY id")]



# --- processes (spawned; top-level so multiprocessing can import them) ---------------


def relay_until_told(url: str, batch_size: int, done: Any) -> None:
    """Relay in batches until ``done`` is set and nothing is left pending."""
    relay = Relay(Database(url), RelayConfig(batch_size=batch_size))
    while True:
        finished = done.is_set()
        if relay.run_once().claimed == 0:
            if finished:
                break
            time.sleep(0.01)
    relay.close()


def produce(url: str, prefix: str, transactions: int, per_tx: int) -> None:
    """Record ``per_tx`` intents per transaction; every third transaction rolls back.

    A ``RetryTransaction`` (MariaDB can pick a producer as a deadlock victim between two
    producers' inserts) is handled as the contract says: run the whole transaction again.
    """
    for t in range(transactions):
        keys = [f"{prefix}:{t}:{i}" for i in range(per_tx)]
        for attempt in range(1, 6):
            try:
                record_many(url, keys, commit=t % 3 != 2)
                break
            except RetryTransaction:
                if attempt == 5:
                    raise


def relay_forever(url: str, batch_size: int) -> None:
    """A relay that drains and exits; killed from outside in the crash test."""
    Relay(Database(url), RelayConfig(batch_size=batch_size)).run()


def spawn(target: Any, *args: Any) -> multiprocessing.process.BaseProcess:
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args)
    proc.start()
    return proc


# --- a big backlog -----------------------------------------------------------------------


def fill_pending(conn: Connection, rows: int) -> None:
    """Insert ``rows`` valid pending intents quickly (one multi-row insert per 1,000)."""
    from outbox.job import NormalJob, fingerprint

    ph = placeholder(conn)
    now = "0"
    for start in range(0, rows, 1000):
        values, params = [], []
        for i in range(start, min(rows, start + 1000)):
            payload = f'{{"n":{i}}}'
            fp = fingerprint(NormalJob("bench.job", "bench", payload, None), None)
            values.append(f"({', '.join([ph] * 6)}, 'pending', {now})")
            params += [
                new_message_id(),
                sha256_hex(f"bench:{i}"),
                fp,
                "bench.job",
                "bench",
                payload,
            ]
        conn.execute_sql(
            "INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue,"
            " payload, state, created_at) VALUES " + ", ".join(values),
            params,
        )


# The floor issue 5 compares the relay with (PostgreSQL): move rows, keep no tombstone,
# verify nothing.
RAW_MOVE = """
WITH moved AS (
    DELETE FROM outbox_messages WHERE id IN (
        SELECT id FROM outbox_messages WHERE state = 'pending'
        ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
    RETURNING id, message_id, queue, job_name, payload, max_attempts, available_at
)
INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts, max_attempts,
                         available_at, created_at)
SELECT message_id, queue, job_name, payload, 0, max_attempts, 0, 0 FROM moved ORDER BY id
"""

