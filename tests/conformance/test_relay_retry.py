"""The shared retry policy under real lock conflicts: a deadlock, and SQLite BUSY."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest

from outbox.db.connection import Connection, Database
from outbox.errors import DatabaseError
from outbox.ids import new_message_id
from tests.fixtures.factories import make_job
from tests.fixtures.gaps import Gap, skip_gap, skip_unless
from tests.fixtures.relays import captured_logs, placeholder


def _two_jobs(conn: Connection) -> tuple[int, int]:
    return make_job(conn), make_job(conn)


def test_transact_retries_the_victim_of_a_real_deadlock(
    database: Database, conn: Connection
) -> None:
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_ONE_WRITER)
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

    with captured_logs() as logs:
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
    skip_unless(database.dialect.name, "sqlite", gap=Gap.SQLITE_BUSY)
    holder = sqlite3.connect(database.url.database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    impatient = Database(db_url, sqlite_busy_timeout_ms=100)
    result: list[int] = []

    def write() -> None:
        with impatient.connect() as c:
            result.append(
                c.transact(lambda t: len(t.execute("status_state_counts")), operation="busy test")
            )

    with captured_logs() as logs:
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


def _make_impatient(c: Connection) -> None:
    """Give up on a row lock quickly: MariaDB with its (retryable) lock wait timeout,
    PostgreSQL with ``lock_timeout`` (55P03, which is not on the retry list)."""
    if c.dialect.name == "mysql":
        c.execute_sql("SET SESSION innodb_lock_wait_timeout = 1")
    elif c.dialect.name == "postgresql":
        c.execute_sql("SET lock_timeout = '200ms'")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["transact", "atomic"])
def test_retry_policy_gives_up_after_four_attempts_and_retries_only_confirmed_safe_errors(
    db_url: str, database: Database, conn: Connection, method: str
) -> None:
    """``transact`` and ``atomic`` (one statement, no BEGIN on a server) share the policy."""
    a, _ = _two_jobs(conn)
    ph = placeholder(conn)
    bump = f"UPDATE outbox_jobs SET attempts = attempts + 1 WHERE id = {ph}"
    calls = 0

    def body(c: Connection) -> None:
        nonlocal calls
        calls += 1
        c.execute_sql(bump, (a,))

    with conn.transaction(), captured_logs() as logs:
        conn.execute_sql(bump, (a,))  # holds the row (SQLite: the writer lock) throughout
        with Database(db_url, sqlite_busy_timeout_ms=50).connect() as impatient:
            _make_impatient(impatient)
            with pytest.raises(DatabaseError, match=r"^lock test failed: \w+ \(") as caught:
                getattr(impatient, method)(body, operation="lock test")
    retries = [e for e in logs if e["event"] == "db.retry"]
    # SQLite: BUSY at BEGIN IMMEDIATE, body never ran; MariaDB: lock wait timeout 1205,
    # retried; PostgreSQL: lock_timeout is not a confirmed deadlock, so no retry at all.
    expected = {"sqlite": (0, 3), "mysql": (4, 3), "postgresql": (1, 0)}[database.dialect.name]
    assert (calls, len(retries)) == expected
    assert [e["attempt"] for e in retries] == list(range(1, len(retries) + 1))
    assert caught.value.__cause__ is not None
    assert conn.execute_sql("SELECT attempts FROM outbox_jobs ORDER BY id") == [(1,), (0,)]


def test_transact_does_not_retry_a_constraint_violation_and_keeps_nothing(
    database: Database, conn: Connection
) -> None:
    duplicate = new_message_id()
    calls = 0

    def body(c: Connection) -> None:
        nonlocal calls
        calls += 1
        make_job(c)
        make_job(c, message_id=duplicate)
        make_job(c, message_id=duplicate)

    with captured_logs() as logs, pytest.raises(DatabaseError, match=r"^dup test failed: "):
        conn.transact(body, operation="dup test")
    assert calls == 1
    assert not [e for e in logs if e["event"] == "db.retry"]
    assert conn.execute_sql("SELECT count(*) FROM outbox_jobs") == [(0,)]


def test_a_failed_commit_is_rolled_back_and_the_connection_stays_usable(
    db_url: str, database: Database, conn: Connection
) -> None:
    if database.dialect.name == "mysql":
        skip_gap(Gap.MYSQL_IMMEDIATE_CONSTRAINTS)
    if database.dialect.name == "sqlite":
        conn.execute_sql("PRAGMA foreign_keys = ON")
    conn.execute_sql("CREATE TEMP TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute_sql(
        "CREATE TEMP TABLE child (parent_id INTEGER"
        " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )

    def body(c: Connection) -> None:
        make_job(c)
        c.execute_sql("INSERT INTO child (parent_id) VALUES (1)")  # fails only at COMMIT

    with pytest.raises(DatabaseError, match=r"^orphan test failed: "):
        conn.transact(body, operation="orphan test")
    # SQLite keeps a transaction open (and its writer lock held) after a failed COMMIT;
    # the connection must have rolled it back, or every other writer would wait on it.
    if database.dialect.name == "sqlite":
        assert not conn.raw.in_transaction
    with Database(db_url, sqlite_busy_timeout_ms=50).connect() as other:
        assert other.transact(
            lambda c: c.execute_sql("SELECT count(*) FROM outbox_jobs"), operation="other writer"
        ) == [(0,)]
    assert conn.transact(
        lambda c: c.execute_sql("SELECT count(*) FROM child"), operation="same connection"
    ) == [(0,)]
