"""The test harness's reused databases (``tests/fixtures/recycle.py``): a table a test
added is dropped and the database served again, empty; a change to the migration's own
tables still gets the database dropped. A database handed to the next test in another
shape would make that test pass or fail for a reason of the harness's."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job
from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.queue import push
from tests.fixtures import databases as backends
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts


def _migrate(url: str) -> None:
    with Database(url).connect() as c:
        migrate(c)


@pytest.fixture
def pool(backend: str, _servers: dict[str, Any]) -> backends._Pool:
    skip_unless(backend, "postgresql", "mysql", gap=Gap.SQLITE_FILE)  # nothing to reuse
    pool: backends._Pool = _servers[backend]
    return pool


def _use(pool: backends._Pool, fn: Any) -> str:
    """Take a migrated database, run ``fn`` on a connection to it, give it back."""
    url = pool.migrated_url(_migrate)
    with Database(url).connect() as c:
        fn(c, url)
    pool.give_back(url)
    return url


def _tables(c: Connection) -> set[str]:
    sql = {
        "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
        "mysql": "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = DATABASE()",
    }[c.dialect.name]
    return {str(r[0]) for r in c.execute_sql(sql)}


def test_a_table_the_test_added_is_dropped_and_the_database_served_empty(
    pool: backends._Pool,
) -> None:
    def add(c: Connection, url: str) -> None:
        c.execute_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, title VARCHAR(100))")
        c.execute_sql("INSERT INTO notes (id, title) VALUES (1, 't')")
        app = backends.raw_connect(url)
        push(app, Job("notes.index", {"n": 1}, queue="q"))
        app.commit()
        app.close()

    used = _use(pool, add)
    again = pool.migrated_url(_migrate)
    try:
        assert again == used  # served again, not a new database
        with Database(again).connect() as c:
            assert "notes" not in _tables(c)
            assert counts(c, ("outbox_jobs",)) == {"outbox_jobs": 0}
    finally:
        pool.give_back(again)


def test_a_changed_outbox_table_gets_the_database_dropped(pool: backends._Pool) -> None:
    def alter(c: Connection, url: str) -> None:  # an added table that an outbox table now refers to
        c.execute_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
        c.execute_sql("ALTER TABLE outbox_jobs ADD COLUMN note_id INTEGER REFERENCES notes (id)")

    used = _use(pool, alter)
    again = pool.migrated_url(_migrate)
    try:
        assert again != used
        with Database(again).connect() as c:
            assert "notes" not in _tables(c)
            with pytest.raises(Exception, match="note_id"):
                c.execute_sql("SELECT note_id FROM outbox_jobs")
    finally:
        pool.give_back(again)
