"""record(), record_many(), push() and push_many() on connections whose rows are not tuples.

Applications often set a row shape on the connection they hand us: psycopg's
``row_factory=dict_row``, PyMySQL's or mysqlclient's ``DictCursor``, psycopg 2's
``RealDictCursor``, a sqlite3 ``row_factory``. Our statements read rows by position, so
each call must get tuples whatever the connection's setting. The replay of a key reads
its holder back and the conflict names it: both are the paths that used to fail (a bare
``KeyError: 0`` on a ``dict_row`` connection, on the second ``record()`` of a key).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from outbox.db.connection import Connection
from tests.fixtures.databases import mysql_kwargs, pg_kwargs
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import (
    PRODUCED,
    PRODUCED_ASYNC,
    counts,
    grew_by,
    producer_calls,
    producer_calls_async,
)


def _dict_rows(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cur.description, row, strict=True)}


def _sqlite_dicts(url: str) -> Any:
    c = sqlite3.connect(make_url(url).database or ":memory:", timeout=30)
    c.row_factory = _dict_rows
    return c


def _psycopg_dicts(url: str) -> Any:
    import psycopg
    from psycopg.rows import dict_row

    return psycopg.connect(**pg_kwargs(url), row_factory=dict_row)


def _psycopg2_dicts(url: str) -> Any:
    import psycopg2
    from psycopg2.extras import RealDictCursor

    return psycopg2.connect(**pg_kwargs(url), cursor_factory=RealDictCursor)


def _pymysql_dicts(url: str) -> Any:
    return pymysql.connect(**mysql_kwargs(url), cursorclass=pymysql.cursors.DictCursor)


def _mysqlclient_dicts(url: str) -> Any:
    import MySQLdb
    from MySQLdb.cursors import DictCursor

    kw = mysql_kwargs(url)
    return MySQLdb.connect(host=kw["host"], port=kw["port"], user=kw["user"],
                           passwd=kw["password"], db=kw["database"], charset="utf8mb4",
                           cursorclass=DictCursor)


KINDS: dict[str, dict[str, Callable[[str], Any]]] = {
    "sqlite": {"sqlite3 row_factory": _sqlite_dicts},
    "postgresql": {"psycopg dict_row": _psycopg_dicts, "psycopg2 RealDictCursor": _psycopg2_dicts},
    "mysql": {"PyMySQL DictCursor": _pymysql_dicts, "mysqlclient DictCursor": _mysqlclient_dicts},
}


def test_every_call_reads_its_rows_whatever_row_shape_the_connection_has(
    conn: Connection, db_url: str, backend: str
) -> None:
    for kind, connect in KINDS[backend].items():
        before = counts(conn, tuple(PRODUCED))
        app = connect(db_url)
        try:
            if isinstance(app, sqlite3.Connection):
                app.execute("BEGIN")
            producer_calls(app, kind)
            app.commit()
        finally:
            app.close()
        assert grew_by(conn, before) == PRODUCED, kind


def test_async_psycopg_with_dict_rows_replays_and_conflicts(
    conn: Connection, db_url: str, backend: str
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)

    async def body() -> None:
        import psycopg
        from psycopg.rows import dict_row

        app = await psycopg.AsyncConnection.connect(**pg_kwargs(db_url), row_factory=dict_row)
        try:
            await producer_calls_async(app, "async dict_row")
            await app.commit()
        finally:
            await app.close()

    asyncio.run(body())
    assert counts(conn, tuple(PRODUCED_ASYNC)) == PRODUCED_ASYNC
