"""The shared retry policy under real lock conflicts: a deadlock, and SQLite BUSY."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox.db.connection import Connection, Database
from outbox.ids import new_message_id
from tests.relay_support import db_now_ms, placeholder


def _two_jobs(conn: Connection) -> tuple[int, int]:
    ph = placeholder(conn)
    now = db_now_ms(conn)
    for _ in range(2):
        conn.execute_sql(
            "INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts,"
            f" available_at, created_at) VALUES ({ph}, 'q', 'j', 'null', 0, {ph}, {ph})",
            (new_message_id(), now, now),
        )
    a, b = (r[0] for r in conn.execute_sql("SELECT id FROM outbox_jobs ORDER BY id"))
    return a, b


def test_transact_retries_the_victim_of_a_real_deadlock(
    database: Database, conn: Connection
) -> None:
    if database.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer (BEGIN IMMEDIATE): transactions cannot deadlock")
    a, b = _two_jobs(conn)
    both_hold_one = threading.Barrier(2, timeout=30)
    ph = placeholder(conn)
    bump = f"UPDATE outbox_jobs SET attempts = attempts + 1 WHERE id = {ph}"
    errors: list[BaseException] = []

    def worker(first: int, second: int) -> None:
        tries = 0

        def body(c: Connection) -> None:
            nonlocal tries
            tries += 1
            c.execute_sql(bump, (first,))
            if tries == 1:
                both_hold_one.wait()
            c.execute_sql(bump, (second,))

        try:
            with database.connect() as own:
                own.transact(body, operation="deadlock test")
        except BaseException as exc:
            errors.append(exc)

    with capture_logs() as logs:
        threads = [threading.Thread(target=worker, args=pair) for pair in ((a, b), (b, a))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    retries = [e for e in logs if e["event"] == "db.retry"]
    assert len(retries) >= 1
    assert retries[0]["operation"] == "deadlock test"
    # Each transaction bumped both rows exactly once: the victim's first try was rolled back.
    assert conn.execute_sql("SELECT attempts FROM outbox_jobs ORDER BY id") == [(2,), (2,)]


def test_transact_retries_sqlite_busy_until_the_writer_lets_go(db_url: str, database: Any) -> None:
    if database.dialect.name != "sqlite":
        pytest.skip("SQLITE_BUSY is SQLite's; the deadlock test covers the servers")
    holder = sqlite3.connect(database.url.database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    impatient = Database(db_url, sqlite_busy_timeout_ms=100)
    result: list[int] = []

    def write() -> None:
        with impatient.connect() as c:
            result.append(
                c.transact(lambda t: len(t.execute("status_state_counts")), operation="busy test")
            )

    with capture_logs() as logs:
        thread = threading.Thread(target=write)
        thread.start()
        end = time.monotonic() + 30
        while not any(e["event"] == "db.retry" for e in logs):
            assert time.monotonic() < end
            time.sleep(0.002)
        holder.execute("COMMIT")
        thread.join(30)
    holder.close()
    assert len(result) == 1
    assert next(e["error"] for e in logs if e["event"] == "db.retry") == "OperationalError"
