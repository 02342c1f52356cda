"""record() and push() through SQLAlchemy on every driver an application may have chosen.

SQLAlchemy's default PostgreSQL driver for a plain ``postgresql://`` URL is psycopg 2 and
its default MySQL driver mysqlclient; applications also pick psycopg 3, PyMySQL,
asyncpg and aiosqlite. For each: the calls join ``engine.begin()``'s transaction (the
replay reads the key's holder, the conflict names it), and an AUTOCOMMIT connection is
refused with ``NoActiveTransaction`` and nothing written. Before the fix psycopg 2 failed
every call with ``AttributeError: ... no attribute 'pgconn'``: the transaction check
took it for psycopg 3.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from outbox import push, record, record_async
from outbox.db.connection import Connection
from outbox.errors import NoActiveTransaction
from tests.fixtures import databases as backends
from tests.fixtures.databases import backend_of
from tests.fixtures.records import (
    NOTE_JOB,
    PRODUCED,
    PRODUCED_ASYNC,
    counts,
    grew_by,
    producer_calls,
    producer_calls_async,
)

SYNC = {
    "sqlite": ["sqlite+pysqlite"],
    "postgresql": ["postgresql+psycopg2", "postgresql+psycopg"],
    "mysql": ["mysql+pymysql", "mysql+mysqldb"],
}
ASYNC = {
    "sqlite": ["sqlite+aiosqlite"],
    "postgresql": ["postgresql+asyncpg", "postgresql+psycopg_async"],
}  # no async MariaDB driver is part of the project


def _engine_args(db_url: str, driver: str) -> tuple[str, dict[str, Any]]:
    """The test database as ``driver``'s URL, and its connect arguments (the PostgreSQL
    test databases are schemas, chosen by ``options``; asyncpg takes server settings)."""
    u = make_url(db_url)
    options = u.query.get("options")
    u = u.set(drivername=driver, query={})
    if options is None:
        return u.render_as_string(hide_password=False), {}
    if driver.endswith("asyncpg"):
        schema = str(options).split("search_path=", 1)[1]
        return u.render_as_string(hide_password=False), {
            "server_settings": {"search_path": schema}
        }
    return u.render_as_string(hide_password=False), {"options": str(options)}


def test_every_sync_driver_joins_the_transaction_and_refuses_autocommit(
    conn: Connection, db_url: str
) -> None:
    for driver in SYNC[backend_of(db_url)]:
        before = counts(conn, tuple(PRODUCED))
        url, connect_args = _engine_args(db_url, driver)
        engine = sa.create_engine(url, connect_args=connect_args)
        try:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as auto:
                with pytest.raises(NoActiveTransaction):
                    record(auto, f"{driver}:auto", NOTE_JOB)
                with pytest.raises(NoActiveTransaction):
                    push(auto, NOTE_JOB)
            assert counts(conn, tuple(PRODUCED)) == before, driver
            with engine.begin() as c:
                producer_calls(c, driver)
        finally:
            engine.dispose()
        assert grew_by(conn, before) == PRODUCED, driver


@pytest.mark.parametrize(
    "backend", [b for b in backends.BACKENDS if b in ASYNC], indirect=True
)
def test_every_async_driver_joins_the_transaction_and_refuses_autocommit(
    conn: Connection, db_url: str
) -> None:
    async def body(driver: str) -> None:
        url, connect_args = _engine_args(db_url, driver)
        engine = create_async_engine(url, connect_args=connect_args)
        try:
            async with engine.connect() as plain:
                auto = await plain.execution_options(isolation_level="AUTOCOMMIT")
                with pytest.raises(NoActiveTransaction):
                    await record_async(auto, f"{driver}:auto", NOTE_JOB)
            async with engine.begin() as c:
                await producer_calls_async(c, driver)
        finally:
            await engine.dispose()

    for driver in ASYNC[backend_of(db_url)]:
        before = counts(conn, tuple(PRODUCED_ASYNC))
        asyncio.run(body(driver))
        assert grew_by(conn, before) == PRODUCED_ASYNC, driver
