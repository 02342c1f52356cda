"""What record(), record_many() and push_many() send: the statements per call on each
backend (one on PostgreSQL, two where an insert cannot write two tables, one more only
on MySQL 8), and PostgreSQL's hot statements prepared by the driver unless the
application turned preparing off (PgBouncer in transaction mode).

Statements are counted by the database or the driver itself: SQLite's trace callback,
MariaDB's per-session ``Questions`` counter, a psycopg cursor class that counts its
``execute`` calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from outbox import Job, push_many, record, record_many
from outbox.db import adapters
from outbox.db.connection import Connection
from outbox.db.dialect import MARIADB, MYSQL, POSTGRESQL, on_server
from outbox.errors import IdempotencyConflict
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts, create_notes, insert_note

JOB = Job("notes.index", {"note_id": 1}, queue="search")


@pytest.fixture(autouse=True)
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


class CountingCursor(psycopg.Cursor[Any]):
    sent = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingCursor.sent += 1
        return super().execute(*args, **kwargs)


def sent_by(app_conn: Any, backend: str, call: Callable[[], object]) -> int:
    """How many statements ``call`` sent on ``app_conn`` (inside its open transaction)."""
    if backend == "sqlite":
        seen: list[str] = []
        app_conn.set_trace_callback(seen.append)
        try:
            call()
        finally:
            app_conn.set_trace_callback(None)
        return len(seen)
    if backend == "mysql":

        def questions() -> int:
            with app_conn.cursor() as cur:
                cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
                return int(cur.fetchone()[1])

        before = questions()
        call()
        return questions() - before - 1  # the second SHOW counts itself
    CountingCursor.sent = 0
    app_conn.cursor_factory = CountingCursor
    try:
        call()
    finally:
        app_conn.cursor_factory = psycopg.Cursor
    return CountingCursor.sent


# (fresh key, replayed key) statements per record(), per backend; MariaDB 10.5+ here.
RECORD = {"postgresql": (1, 2), "mysql": (2, 1), "sqlite": (2, 2)}
# record_many of new keys, push_many: statements per call.
MANY = {"postgresql": 1, "mysql": 2, "sqlite": 2}


def test_record_sends_one_statement_on_postgresql_two_elsewhere(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)  # the transaction is open before counting
    fresh, replay = RECORD[backend]
    ids: list[str] = []
    assert sent_by(app_conn, backend, lambda: ids.append(record(app_conn, "k1", JOB))) == fresh
    assert sent_by(app_conn, backend, lambda: ids.append(record(app_conn, "k1", JOB))) == replay
    app_conn.commit()
    assert ids[0] == ids[1] and counts(notes)["outbox_messages"] == 1


def test_record_many_and_push_many_send_one_statement_per_table_at_most(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    batch = [(f"k{i}", Job("notes.index", {"note_id": i})) for i in range(50)]
    assert sent_by(app_conn, backend, lambda: record_many(app_conn, batch)) == MANY[backend]
    jobs = [Job("mail.send", {"n": i}) for i in range(50)]
    assert sent_by(app_conn, backend, lambda: push_many(app_conn, jobs)) == 1
    app_conn.commit()
    assert counts(notes)["outbox_messages"] == counts(notes)["outbox_jobs"] == 50


def _prepared(app_conn: Any) -> list[str]:
    rows = app_conn.execute(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%outbox_keys%'"
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("threshold", [5, None])
def test_postgresql_prepares_the_hot_statement_unless_preparing_is_off(
    backend: str, db_url: str, notes: Connection, threshold: int | None
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)
    app = raw_connect(db_url)
    try:
        app.prepare_threshold = threshold  # None: PgBouncer in transaction mode
        for i in range(8):
            record(app, f"p{i}", JOB)
        prepared = _prepared(app)
        app.commit()
    finally:
        app.close()
    if threshold is None:
        assert prepared == []
    else:
        assert len(prepared) == 1 and "INSERT INTO outbox_keys" in prepared[0]
    assert counts(notes)["outbox_messages"] == 8


def test_the_server_version_picks_the_returning_path() -> None:
    assert on_server(MYSQL, "5.5.5-10.11.19-MariaDB-0+deb12u1") is MARIADB
    assert on_server(MYSQL, "10.5.2-MariaDB") is MARIADB
    assert on_server(MYSQL, "10.4.30-MariaDB-log") is MYSQL  # no INSERT ... RETURNING yet
    assert on_server(MYSQL, "8.0.36") is MYSQL
    assert on_server(MYSQL, "") is MYSQL
    assert on_server(POSTGRESQL, "10.11.19-MariaDB") is POSTGRESQL


def test_the_mysql_8_path_without_returning_still_means_the_same(
    app_conn: Any, notes: Connection, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL 8's statements (no RETURNING: key row, intent, lookup), run on MariaDB,
    which accepts them."""
    skip_unless(backend, "mysql", gap=Gap.PYMYSQL_CONNECTION)
    monkeypatch.setattr(adapters, "on_server", lambda dialect, version: dialect)
    insert_note(app_conn, backend, 1)
    ids: list[str] = []
    assert sent_by(app_conn, backend, lambda: ids.append(record(app_conn, "k1", JOB))) == 3
    assert sent_by(app_conn, backend, lambda: ids.append(record(app_conn, "k1", JOB))) == 3
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k1", Job("notes.index", {"note_id": 2}))
    batch = [(f"k{i}", JOB) for i in range(1, 4)]
    many: list[str] = []
    assert sent_by(app_conn, backend, lambda: many.extend(record_many(app_conn, batch))) == 3
    app_conn.commit()
    assert ids[0] == ids[1] == many[0] and len(set(many)) == 3
    assert counts(notes)["outbox_messages"] == 3
