"""record() and push() on psycopg connections in the modes applications set them to.

A connection made with ``cursor_factory=RawCursor`` (``$1`` placeholders) or
``ClientCursor`` (client-side binding, as behind PgBouncer), and a connection in pipeline
mode (``with conn.pipeline():``, where a statement's rows arrive only at the next sync),
sync and async. Each must record, replay a key to its holder, name the holder of a
conflicting key and push, in the caller's transaction. Before the fix a raw-cursor
connection failed with ``record failed: TypeError`` and pipeline mode with
``RetryTransaction`` on every call.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from outbox.db.connection import Connection
from tests.fixtures import databases as backends
from tests.fixtures.databases import pg_kwargs
from tests.fixtures.records import (
    PRODUCED,
    PRODUCED_ASYNC,
    counts,
    producer_calls,
    producer_calls_async,
)

# psycopg connects to PostgreSQL only: these run on that backend alone.
pytestmark = pytest.mark.parametrize(
    "backend", [b for b in backends.BACKENDS if b == "postgresql"], indirect=True
)


@pytest.mark.parametrize("pipelined", [False, True], ids=["no pipeline", "in a pipeline"])
@pytest.mark.parametrize("factory", ["RawCursor", "ClientCursor", "Cursor"])
def test_each_cursor_kind_and_pipeline_mode_records_replays_conflicts_and_pushes(
    conn: Connection, db_url: str, factory: str, pipelined: bool
) -> None:
    app = psycopg.connect(**pg_kwargs(db_url), cursor_factory=getattr(psycopg, factory))
    try:
        if pipelined:
            with app.pipeline():
                producer_calls(app, factory)
        else:
            producer_calls(app, factory)
        app.commit()
    finally:
        app.close()
    assert counts(conn, tuple(PRODUCED)) == PRODUCED


@pytest.mark.parametrize("pipelined", [False, True], ids=["no pipeline", "in a pipeline"])
@pytest.mark.parametrize("factory", ["AsyncRawCursor", "AsyncClientCursor"])
def test_async_cursor_kinds_and_pipeline_mode_record_replay_and_push(
    conn: Connection, db_url: str, factory: str, pipelined: bool
) -> None:
    async def body() -> None:
        app = await psycopg.AsyncConnection.connect(
            **pg_kwargs(db_url), cursor_factory=getattr(psycopg, factory)
        )
        try:
            if pipelined:
                async with app.pipeline():
                    await producer_calls_async(app, factory)
            else:
                await producer_calls_async(app, factory)
            await app.commit()
        finally:
            await app.close()

    asyncio.run(body())
    assert counts(conn, tuple(PRODUCED_ASYNC)) == PRODUCED_ASYNC
