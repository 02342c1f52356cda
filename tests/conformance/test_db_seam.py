"""The seam's own rules: the retry hook, and errors told apart by code, never by text."""

from __future__ import annotations

import sqlite3

import pytest

from outbox.db.connection import Connection, Database
from outbox.errors import DatabaseError, TablesMissing
from outbox.queue.control import pause
from tests.fixtures.gaps import Gap, skip_unless


def test_on_retry_is_called_with_the_operation_each_time_it_runs_again(
    db_url: str, database: Database
) -> None:
    skip_unless(database.dialect.name, "sqlite", gap=Gap.SQLITE_BUSY)
    holder = sqlite3.connect(database.url.database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the writer lock, until the first retry lets it go
    retried: list[str] = []

    def on_retry(operation: str) -> None:
        retried.append(operation)
        if holder.in_transaction:
            holder.execute("COMMIT")

    impatient = Database(db_url, sqlite_busy_timeout_ms=1, on_retry=on_retry)
    with impatient.connect() as c:
        assert c.transact(lambda t: t.driver.clock_now() > 0, operation="hook test")
    holder.close()
    assert retried == ["hook test"]


def test_a_missing_table_is_known_by_its_code(db_url: str) -> None:
    with Database(db_url).connect() as c, pytest.raises(DatabaseError) as err:
        c.driver.outbox_pending_count()
    # SQLite has no code of its own for it: its fixed text "no such table: outbox_" tells
    # (test_an_error_that_only_says_no_such_table_is_not_taken_for_one: nothing else does).
    assert isinstance(err.value, TablesMissing)
    assert err.value.code in ("SQLITE_ERROR", "42P01", 1146)
    assert "create them with `outbox migrate`" in str(err.value)


def test_an_error_that_only_says_no_such_table_is_not_taken_for_one(conn: Connection) -> None:
    skip_unless(conn.dialect.name, "sqlite", gap=Gap.SQLITE3_CONNECTION)
    conn.execute_sql(
        "CREATE TRIGGER refuse BEFORE INSERT ON outbox_paused_queues "
        "BEGIN SELECT RAISE(ABORT, 'no such table, says the trigger'); END"
    )
    with pytest.raises(DatabaseError) as err:
        pause(conn, "q")
    assert err.value.code == "SQLITE_CONSTRAINT_TRIGGER"
    assert "outbox migrate" not in str(err.value)
