"""record_async() on SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection.

The same promises as the sync kinds: the intent joins the caller's transaction, an
autocommit or closed connection is refused with nothing written, and a connection of the
wrong colour (sync given to the async API, or the reverse) is refused before anything
is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from outbox import Job, record, record_async
from outbox.db.connection import Connection
from outbox.errors import NoActiveTransaction, UnsupportedConnection
from outbox.queue import push_async
from tests.fixtures.databases import pg_kwargs, raw_connect, sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_gap, skip_unless
from tests.fixtures.records import counts, create_notes, message_rows

JOB = Job("notes.index", {"note_id": 1}, queue="search")
INSERT_NOTE = sa.text("INSERT INTO notes (id, title) VALUES (:id, 't')")


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def has_async_driver(backend: str) -> None:
    """Asked before the database is made, so a skipped backend costs nothing."""
    if backend == "mysql":
        skip_gap(Gap.NO_ASYNC_MYSQL_DRIVER)


@pytest.fixture
def async_url(has_async_driver: None, db_url: str) -> str:
    return sqlalchemy_url(db_url, is_async=True)


@pytest.fixture
def pg_only(backend: str) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)


@pytest.fixture
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


async def _with_engine(url: str, body: Callable[[Any], Awaitable[None]]) -> None:
    engine = create_async_engine(url)
    try:
        await body(engine)
    finally:
        await engine.dispose()


def test_async_connection_writes_the_intent_in_the_callers_transaction(
    async_url: str, notes: Connection
) -> None:
    async def body(engine: Any) -> None:
        async with engine.connect() as c:
            await c.execute(INSERT_NOTE, {"id": 1})
            await record_async(c, "k", JOB)
            assert counts(notes)["outbox_messages"] == 0
            await c.rollback()
        assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0
        async with engine.begin() as c:
            await c.execute(INSERT_NOTE, {"id": 1})
            message_id = await record_async(c, "k", JOB)
        assert [r["message_id"] for r in message_rows(notes)] == [message_id]
        assert counts(notes)["notes"] == 1

    run(_with_engine(async_url, body))


def test_async_session_writes_the_intent_in_the_callers_transaction(
    async_url: str, notes: Connection
) -> None:
    async def body(engine: Any) -> None:
        make = async_sessionmaker(engine)
        async with make() as s:
            await s.execute(INSERT_NOTE, {"id": 1})
            await record_async(s, "k", JOB)
            await s.rollback()
        assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0
        async with make() as s, s.begin():
            await s.execute(INSERT_NOTE, {"id": 1})
            first = await record_async(s, "k", JOB)
            assert await record_async(s, "k", JOB) == first
        assert [r["message_id"] for r in message_rows(notes)] == [first]

    run(_with_engine(async_url, body))


def test_async_autocommit_or_closed_connection_is_refused(
    async_url: str, notes: Connection
) -> None:
    async def body(engine: Any) -> None:
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        async with autocommit.connect() as c:
            with pytest.raises(NoActiveTransaction, match="autocommit"):
                await record_async(c, "k", JOB)
        async with AsyncSession(autocommit) as s:
            with pytest.raises(NoActiveTransaction):
                await record_async(s, "k", JOB)
        c = await engine.connect()
        await c.close()
        with pytest.raises(NoActiveTransaction, match="closed"):
            await record_async(c, "k", JOB)

    run(_with_engine(async_url, body))
    assert counts(notes)["outbox_messages"] == 0


def test_psycopg_async_connection_joins_its_transaction_and_refuses_autocommit(
    pg_only: None, db_url: str, notes: Connection
) -> None:
    import psycopg

    async def body() -> None:
        c = await psycopg.AsyncConnection.connect(**pg_kwargs(db_url))
        try:
            await c.execute("INSERT INTO notes (id, title) VALUES (1, 't')")
            await record_async(c, "k", JOB)
            await push_async(c, JOB)
            await c.rollback()
            assert counts(notes) == {
                "outbox_messages": 0,
                "outbox_jobs": 0,
                "outbox_failed_jobs": 0,
                "notes": 0,
            }
            await c.set_autocommit(True)
            with pytest.raises(NoActiveTransaction, match="autocommit"):
                await record_async(c, "k", JOB)
            async with c.transaction():
                message_id = await record_async(c, "k", JOB)
            assert [r["message_id"] for r in message_rows(notes)] == [message_id]
        finally:
            await c.close()
        with pytest.raises(NoActiveTransaction, match="closed"):
            await record_async(c, "k2", JOB)

    run(body())


def test_a_connection_of_the_wrong_colour_is_refused_before_anything_is_sent(
    pg_only: None, db_url: str, notes: Connection
) -> None:
    import psycopg

    sync = raw_connect(db_url)
    try:
        with pytest.raises(UnsupportedConnection, match=r"is sync; use record\(\)"):
            run(record_async(sync, "k", JOB))
        sync.commit()
    finally:
        sync.close()

    async def body() -> None:
        c = await psycopg.AsyncConnection.connect(**pg_kwargs(db_url))
        try:
            with pytest.raises(UnsupportedConnection, match=r"is async; use record_async\(\)"):
                record(c, "k", JOB)
            await c.commit()
        finally:
            await c.close()

    run(body())
    assert counts(notes)["outbox_messages"] == 0


def test_record_async_refuses_sync_sqlalchemy_and_sqlite3_connections(
    db_url: str, backend: str, notes: Connection
) -> None:
    engine = sa.create_engine(sqlalchemy_url(db_url))
    try:
        with engine.connect() as c, pytest.raises(UnsupportedConnection, match="AsyncConnection"):
            run(record_async(c, "k", JOB))
    finally:
        engine.dispose()
    if backend == "sqlite":
        raw = raw_connect(db_url)
        try:
            with pytest.raises(UnsupportedConnection):
                run(record_async(raw, "k", JOB))
        finally:
            raw.close()
    assert counts(notes)["outbox_messages"] == 0
