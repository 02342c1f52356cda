"""record() on every sync connection kind an application uses, on every backend it runs on.

Each kind must write inside the caller's transaction (commit keeps, rollback removes the
business write and the intent together), refuse a connection whose write would commit on
its own or that is closed (``NoActiveTransaction``, nothing written), and never open a
connection of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    scoped_session,
    sessionmaker,
)

from outbox import Job, record
from outbox.db.connection import Connection
from outbox.errors import NoActiveTransaction, UnsupportedConnection
from outbox.queue import push
from tests.fixtures.databases import raw_connect, sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts, create_notes, insert_note, message_rows

JOB = Job("notes.index", {"note_id": 1}, queue="search")
INSERT_NOTE = sa.text("INSERT INTO notes (id, title) VALUES (:id, 't')")


# Connection kinds that exist on one backend only.
@pytest.fixture
def on_sqlite(backend: str) -> None:
    skip_unless(backend, "sqlite", gap=Gap.SQLITE3_CONNECTION)


@pytest.fixture
def on_postgresql(backend: str) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)


@pytest.fixture
def on_mysql(backend: str) -> None:
    skip_unless(backend, "mysql", gap=Gap.PYMYSQL_CONNECTION)


@pytest.fixture
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


@pytest.fixture
def engine(db_url: str, database: object) -> Iterator[sa.Engine]:
    eng = sa.create_engine(sqlalchemy_url(db_url))
    yield eng
    eng.dispose()


@dataclass
class Txn:
    """One open transaction of some connection kind, and how to end it."""

    target: Any
    write_note: Callable[[int], None]
    commit: Callable[[], None]
    rollback: Callable[[], None]


@contextmanager
def sa_begin(engine: sa.Engine) -> Iterator[Txn]:
    with engine.connect() as c:
        tx = c.begin()
        yield Txn(c, lambda n: _sa_note(c, n), tx.commit, tx.rollback)


@contextmanager
def sa_autobegin(engine: sa.Engine) -> Iterator[Txn]:
    with engine.connect() as c:
        yield Txn(c, lambda n: _sa_note(c, n), c.commit, c.rollback)


@contextmanager
def orm_session(engine: sa.Engine) -> Iterator[Txn]:
    with Session(engine) as s:
        yield Txn(s, lambda n: _sa_note(s, n), s.commit, s.rollback)


@contextmanager
def orm_session_begin(engine: sa.Engine) -> Iterator[Txn]:
    with Session(engine) as s:
        tx = s.begin()
        yield Txn(s, lambda n: _sa_note(s, n), tx.commit, tx.rollback)


@contextmanager
def orm_scoped_session(engine: sa.Engine) -> Iterator[Txn]:
    scoped = scoped_session(sessionmaker(engine))
    try:
        yield Txn(scoped, lambda n: _sa_note(scoped(), n), scoped.commit, scoped.rollback)
    finally:
        scoped.remove()


def _sa_note(c: sa.Connection | Session, note_id: int) -> None:
    c.execute(INSERT_NOTE, {"id": note_id})


SA_KINDS = [sa_begin, sa_autobegin, orm_session, orm_session_begin, orm_scoped_session]


@pytest.mark.parametrize("kind", SA_KINDS, ids=lambda k: k.__name__)
def test_sqlalchemy_kinds_write_the_intent_in_the_callers_transaction(
    engine: sa.Engine, notes: Connection, kind: Callable[[sa.Engine], Any]
) -> None:
    with kind(engine) as t:
        t.write_note(1)
        record(t.target, "k", JOB)
        assert counts(notes)["outbox_messages"] == 0  # not before the caller commits
        assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        t.rollback()
    assert counts(notes) == {
        "outbox_messages": 0,
        "outbox_jobs": 0,
        "outbox_failed_jobs": 0,
        "notes": 0,
    }
    with kind(engine) as t:
        t.write_note(1)
        message_id = record(t.target, "k", JOB)
        t.commit()
    assert counts(notes)["notes"] == 1
    assert [r["message_id"] for r in message_rows(notes)] == [message_id]


def test_engine_begin_block_commits_or_rolls_back_the_intent_with_it(
    engine: sa.Engine, notes: Connection
) -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), engine.begin() as c:
        _sa_note(c, 1)
        record(c, "k", JOB)
        raise Abort
    assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0
    with engine.begin() as c:
        _sa_note(c, 1)
        message_id = record(c, "k", JOB)
    assert [r["message_id"] for r in message_rows(notes)] == [message_id]
    assert counts(notes)["notes"] == 1


def test_sqlalchemy_autocommit_connection_is_refused_and_nothing_written(
    engine: sa.Engine, notes: Connection
) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        with pytest.raises(NoActiveTransaction, match="autocommit mode outside a transaction"):
            record(c, "k", JOB)
        # SQLAlchemy's begin() sends no BEGIN in AUTOCOMMIT mode either.
        with c.begin(), pytest.raises(NoActiveTransaction):
            record(c, "k", JOB)
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    with Session(autocommit) as s, pytest.raises(NoActiveTransaction):
        record(s, "k", JOB)
    assert counts(notes)["outbox_messages"] == 0


def test_closed_connections_are_refused(engine: sa.Engine, db_url: str) -> None:
    c = engine.connect()
    c.close()
    with pytest.raises(NoActiveTransaction, match="the SQLAlchemy connection is closed"):
        record(c, "k", JOB)
    raw = raw_connect(db_url)
    raw.close()
    with pytest.raises(NoActiveTransaction, match="is closed"):
        record(raw, "k", JOB)


def test_sqlite3_in_autocommit_mode_is_refused_unless_a_transaction_is_open(
    on_sqlite: None, db_url: str, notes: Connection
) -> None:
    c = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        with pytest.raises(NoActiveTransaction, match="autocommit"):
            record(c, "k", JOB)
        assert counts(notes)["outbox_messages"] == 0
        c.execute("BEGIN")
        record(c, "k", JOB)
        c.execute("ROLLBACK")
        assert counts(notes)["outbox_messages"] == 0
    finally:
        c.close()


def test_psycopg_autocommit_is_refused_but_a_transaction_block_is_joined(
    on_postgresql: None, db_url: str, notes: Connection, backend: str
) -> None:
    import psycopg

    c = raw_connect(db_url)
    try:
        c.autocommit = True
        with pytest.raises(NoActiveTransaction, match="autocommit"):
            record(c, "k", JOB)
        assert counts(notes)["outbox_messages"] == 0
        with c.transaction(force_rollback=True):
            insert_note(c, backend, 1)
            record(c, "k", JOB)
        assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0
        with c.transaction():
            insert_note(c, backend, 1)
            record(c, "k", JOB)
        assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 1
        c.autocommit = False
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM no_such_table")
        with pytest.raises(NoActiveTransaction, match="transaction has failed"):
            record(c, "k2", JOB)
    finally:
        c.close()


def test_psycopg_writes_on_the_callers_session_only(on_postgresql: None, app_conn: Any) -> None:
    sessions = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    before = app_conn.execute(sessions).fetchone()[0]
    record(app_conn, "k", JOB)
    push(app_conn, JOB)
    assert app_conn.execute(sessions).fetchone()[0] == before
    app_conn.rollback()


def test_pymysql_autocommit_is_refused_but_an_explicit_begin_is_joined(
    on_mysql: None, db_url: str, notes: Connection, backend: str
) -> None:
    c = raw_connect(db_url)
    try:
        c.autocommit(True)
        with pytest.raises(NoActiveTransaction, match="autocommit"):
            record(c, "k", JOB)
        assert counts(notes)["outbox_messages"] == 0
        c.begin()
        insert_note(c, backend, 1)
        record(c, "k", JOB)
        c.rollback()
        assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0
        c.begin()
        record(c, "k", JOB)
        c.commit()
        assert counts(notes)["outbox_messages"] == 1
    finally:
        c.close()


@pytest.mark.parametrize(
    "thing",
    [None, "postgresql://x", {"conn": 1}, object()],
    ids=["none", "url", "dict", "object"],
)
def test_something_that_is_not_a_connection_is_unsupported(thing: object) -> None:
    with pytest.raises(UnsupportedConnection, match="expected a SQLAlchemy Connection/Session"):
        record(thing, "k", JOB)


def test_an_engine_or_a_cursor_is_unsupported_and_nothing_written(
    engine: sa.Engine, app_conn: Any, notes: Connection
) -> None:
    with pytest.raises(UnsupportedConnection, match=r"cannot write on a sqlalchemy\..*Engine"):
        record(engine, "k", JOB)
    with engine.connect() as c:
        with pytest.raises(UnsupportedConnection, match="Cursor"):
            record(c.connection.cursor(), "k", JOB)
        with pytest.raises(UnsupportedConnection):
            record(c.connection, "k", JOB)  # SQLAlchemy's pool wrapper, not a connection
    cur = app_conn.cursor()
    try:
        with pytest.raises(UnsupportedConnection, match="Cursor"):
            record(cur, "k", JOB)
    finally:
        cur.close()
    app_conn.commit()
    assert counts(notes)["outbox_messages"] == 0


def test_unsupported_connection_is_also_a_type_error() -> None:
    with pytest.raises(TypeError):
        record(object(), "k", JOB)


class _Base(DeclarativeBase):
    pass


class _Note(_Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    title: Mapped[str] = mapped_column(sa.String(100))


def test_session_whose_flush_failed_is_refused_until_rolled_back(
    engine: sa.Engine, notes: Connection
) -> None:
    with Session(engine) as s:
        s.add(_Note(id=1, title="a"))
        s.flush()
        s.add(_Note(id=1, title="b"))
        with pytest.raises(sa.exc.IntegrityError):
            s.flush()
        with pytest.raises(NoActiveTransaction, match="transaction has failed; roll it back"):
            record(s, "k", JOB)
        s.rollback()
        record(s, "k", JOB)
        s.commit()
    assert counts(notes)["outbox_messages"] == 1 and counts(notes)["notes"] == 0
