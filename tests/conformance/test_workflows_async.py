"""``record_async(conn, key, workflow)`` on SQLAlchemy's AsyncConnection: every node in
the caller's transaction (a rollback leaves nothing), a replay returns the same id."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from outbox import Job, Workflow, record_async
from outbox.db.connection import Connection
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.factories import count_rows
from tests.fixtures.gaps import Gap, skip_gap


@pytest.fixture
def async_url(backend: str, db_url: str) -> str:
    if backend == "mysql":
        skip_gap(Gap.NO_ASYNC_MYSQL_DRIVER)
    return sqlalchemy_url(db_url, is_async=True)


def _wf() -> Workflow:
    wf = Workflow("async")
    a = wf.add(Job("wf.step", {"n": "a"}), name="a")
    wf.add(Job("wf.step", {"n": "b"}), name="b", after=[a])
    return wf


def test_record_async_writes_a_workflow_in_the_callers_transaction(
    async_url: str, conn: Connection
) -> None:
    async def body() -> tuple[str, str]:
        engine = create_async_engine(async_url)
        try:
            async with engine.connect() as c:
                await record_async(c, "async:1", _wf())
                await c.rollback()
            assert count_rows(conn, "outbox_workflow_nodes") == 0
            async with engine.begin() as c:
                first = await record_async(c, "async:1", _wf())
            async with engine.begin() as c:
                again = await record_async(c, "async:1", _wf())
            return first, again
        finally:
            await engine.dispose()

    first, again = asyncio.run(body())
    assert first == again
    assert count_rows(conn, "outbox_workflow_nodes") == 2
    assert count_rows(conn, "outbox_messages") == 1


