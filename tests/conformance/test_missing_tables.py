"""Every producer call on a database without the outbox tables raises ``TablesMissing``
saying so and naming ``outbox migrate`` (issue 38: on SQLite it said only ``record failed:
OperationalError (SQLITE_ERROR)``), on every backend and connection kind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from outbox import (
    Job,
    push,
    push_async,
    push_many,
    push_many_async,
    record,
    record_async,
    record_many,
    record_many_async,
)
from outbox.errors import DatabaseError, TablesMissing
from tests.fixtures.databases import raw_connect, sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_gap

JOB = Job("notes.index", {"note_id": 1})
SAID = "; the outbox tables are missing: create them with `outbox migrate`"
CODES = {"sqlite": "SQLITE_ERROR", "postgresql": "42P01", "mysql": 1146}

CALLS: dict[str, Callable[[Any], Any]] = {
    "record": lambda c: record(c, "k1", JOB),
    "record_many": lambda c: record_many(c, [("k1", JOB), ("k2", JOB)]),
    "push": lambda c: push(c, JOB),
    "push_many": lambda c: push_many(c, [JOB, JOB]),
}
ASYNC_CALLS: dict[str, Callable[[Any], Any]] = {
    "record": lambda c: record_async(c, "k1", JOB),
    "record_many": lambda c: record_many_async(c, [("k1", JOB)]),
    "push": lambda c: push_async(c, JOB),
    "push_many": lambda c: push_many_async(c, [JOB, JOB]),
}


def _check(exc: TablesMissing, operation: str, backend: str) -> None:
    assert isinstance(exc, DatabaseError)  # what callers catching DatabaseError still see
    assert str(exc).startswith(f"{operation} failed: ") and str(exc).endswith(SAID)
    assert exc.code == CODES[backend]


@pytest.mark.parametrize("call", CALLS)
def test_a_producer_call_without_the_tables_says_to_migrate(
    db_url: str, backend: str, call: str
) -> None:
    conn = raw_connect(db_url)
    try:
        if backend == "mysql":
            conn.begin()
        elif backend == "sqlite":
            conn.execute("BEGIN")
        with pytest.raises(TablesMissing) as caught:
            CALLS[call](conn)
        _check(caught.value, call, backend)
    finally:
        conn.rollback()
        conn.close()


@pytest.mark.parametrize("call", ASYNC_CALLS)
def test_an_async_producer_call_without_the_tables_says_to_migrate(
    db_url: str, backend: str, call: str
) -> None:
    if backend == "mysql":
        skip_gap(Gap.NO_ASYNC_MYSQL_DRIVER)

    async def body() -> TablesMissing:
        engine = create_async_engine(sqlalchemy_url(db_url, is_async=True))
        try:
            async with engine.connect() as conn, conn.begin():
                with pytest.raises(TablesMissing) as caught:
                    await ASYNC_CALLS[call](conn)
                return caught.value
        finally:
            await engine.dispose()

    _check(asyncio.run(body()), call, backend)
