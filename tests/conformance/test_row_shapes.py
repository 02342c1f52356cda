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
import pytest
from sqlalchemy.engine import make_url

from outbox import (
    Job,
    push,
    push_many,
    record,
    record_async,
    record_many,
    record_many_async,
)
from outbox.db.connection import Connection
from outbox.errors import IdempotencyConflict
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts

JOB = Job("notes.index", {"note_id": 1}, queue="search")
OTHER = Job("notes.index", {"note_id": 2}, queue="search")


def _dict_rows(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cur.description, row, strict=True)}


def _sqlite_dicts(url: str) -> Any:
    c = sqlite3.connect(make_url(url).database or ":memory:", timeout=30)
    c.row_factory = _dict_rows
    return c


def _pg_kwargs(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {"host": u.host, "port": u.port, "user": u.username, "dbname": u.database,
            **{k: str(v) for k, v in u.query.items()}}


def _psycopg_dicts(url: str) -> Any:
    import psycopg
    from psycopg.rows import dict_row

    return psycopg.connect(**_pg_kwargs(url), row_factory=dict_row)


def _psycopg2_dicts(url: str) -> Any:
    import psycopg2
    from psycopg2.extras import RealDictCursor

    return psycopg2.connect(**_pg_kwargs(url), cursor_factory=RealDictCursor)


def _mysql_kwargs(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {"host": u.host or "127.0.0.1", "port": u.port or 3306, "user": u.username or "root",
            "password": u.password or "", "database": u.database, "charset": "utf8mb4"}


def _pymysql_dicts(url: str) -> Any:
    return pymysql.connect(**_mysql_kwargs(url), cursorclass=pymysql.cursors.DictCursor)


def _mysqlclient_dicts(url: str) -> Any:
    import MySQLdb
    from MySQLdb.cursors import DictCursor

    kw = _mysql_kwargs(url)
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
    for i, (kind, connect) in enumerate(KINDS[backend].items()):
        before = counts(conn, ("outbox_messages", "outbox_jobs"))
        app = connect(db_url)
        try:
            if isinstance(app, sqlite3.Connection):
                app.execute("BEGIN")
            first = record(app, f"k{i}", JOB)
            assert record(app, f"k{i}", JOB) == first, kind  # the replay reads the holder
            with pytest.raises(IdempotencyConflict) as conflict:
                record(app, f"k{i}", OTHER)
            assert conflict.value.message_id == first, kind
            batch = record_many(app, [(f"k{i}", JOB), (f"n{i}", JOB), (f"n{i}", JOB)])
            assert batch[0] == first and batch[1] == batch[2] != first, kind
            pushed = [push(app, JOB), *push_many(app, [JOB, JOB])]
            assert len(set(pushed)) == 3, kind
            app.commit()
        finally:
            app.close()
        after = counts(conn, ("outbox_messages", "outbox_jobs"))
        assert after["outbox_messages"] - before["outbox_messages"] == 2, kind
        assert after["outbox_jobs"] - before["outbox_jobs"] == 3, kind


def test_async_psycopg_with_dict_rows_replays_and_conflicts(
    conn: Connection, db_url: str, backend: str
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)

    async def body() -> tuple[str, list[str]]:
        import psycopg
        from psycopg.rows import dict_row

        app = await psycopg.AsyncConnection.connect(**_pg_kwargs(db_url), row_factory=dict_row)
        try:
            first = await record_async(app, "a", JOB)
            assert await record_async(app, "a", JOB) == first
            with pytest.raises(IdempotencyConflict):
                await record_async(app, "a", OTHER)
            batch = await record_many_async(app, [("a", JOB), ("b", JOB)])
            await app.commit()
            return first, batch
        finally:
            await app.close()

    first, batch = asyncio.run(body())
    assert batch[0] == first and batch[1] != first
    assert counts(conn, ("outbox_messages",)) == {"outbox_messages": 2}
