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
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from outbox import (
    Job,
    push,
    push_async,
    push_many,
    record,
    record_async,
    record_many,
    record_many_async,
)
from outbox.db.connection import Connection
from outbox.errors import IdempotencyConflict
from tests.fixtures import databases as backends
from tests.fixtures.records import counts

JOB = Job("notes.index", {"note_id": 1}, queue="search")
OTHER = Job("notes.index", {"note_id": 2}, queue="search")
TABLES = ("outbox_messages", "outbox_jobs")


# psycopg connects to PostgreSQL only: these run on that backend alone.
pytestmark = pytest.mark.parametrize(
    "backend", [b for b in backends.BACKENDS if b == "postgresql"], indirect=True
)


def _kwargs(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {"host": u.host, "port": u.port, "user": u.username, "dbname": u.database,
            **{k: str(v) for k, v in u.query.items()}}


def _calls(app: Any, tag: str) -> None:
    """Every producer call once, the replay and the conflict included, uncommitted."""
    first = record(app, f"{tag}:a", JOB)
    assert record(app, f"{tag}:a", JOB) == first
    with pytest.raises(IdempotencyConflict) as conflict:
        record(app, f"{tag}:a", OTHER)
    assert conflict.value.message_id == first
    batch = record_many(app, [(f"{tag}:a", JOB), (f"{tag}:b", JOB)])
    assert batch[0] == first and batch[1] != first
    assert len({push(app, JOB), *push_many(app, [JOB, JOB])}) == 3


MODES: dict[str, Callable[[Any, str], None]] = {
    "no pipeline": _calls,
    "in a pipeline": lambda app, tag: _in_pipeline(app, tag),
}


def _in_pipeline(app: Any, tag: str) -> None:
    with app.pipeline():
        _calls(app, tag)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("factory", ["RawCursor", "ClientCursor", "Cursor"])
def test_each_cursor_kind_and_pipeline_mode_records_replays_conflicts_and_pushes(
    conn: Connection, db_url: str, factory: str, mode: str
) -> None:
    app = psycopg.connect(**_kwargs(db_url), cursor_factory=getattr(psycopg, factory))
    try:
        MODES[mode](app, factory)
        app.commit()
    finally:
        app.close()
    assert counts(conn, TABLES) == {"outbox_messages": 2, "outbox_jobs": 3}


@pytest.mark.parametrize("pipelined", [False, True], ids=["no pipeline", "in a pipeline"])
@pytest.mark.parametrize("factory", ["AsyncRawCursor", "AsyncClientCursor"])
def test_async_cursor_kinds_and_pipeline_mode_record_replay_and_push(
    conn: Connection, db_url: str, factory: str, pipelined: bool
) -> None:
    async def calls(app: Any) -> None:
        first = await record_async(app, "a", JOB)
        assert await record_async(app, "a", JOB) == first
        with pytest.raises(IdempotencyConflict):
            await record_async(app, "a", OTHER)
        batch = await record_many_async(app, [("a", JOB), ("b", JOB)])
        assert batch[0] == first and batch[1] != first
        await push_async(app, JOB)

    async def body() -> None:
        app = await psycopg.AsyncConnection.connect(
            **_kwargs(db_url), cursor_factory=getattr(psycopg, factory)
        )
        try:
            if pipelined:
                async with app.pipeline():
                    await calls(app)
            else:
                await calls(app)
            await app.commit()
        finally:
            await app.close()

    asyncio.run(body())
    assert counts(conn, TABLES) == {"outbox_messages": 2, "outbox_jobs": 1}

