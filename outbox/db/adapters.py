"""The caller's connection, whatever kind it is, as one small interface.

``record()`` and ``push()`` write on the caller's own connection, inside the caller's
transaction. This module recognises each supported kind, refuses one whose write would
commit on its own (autocommit outside an explicit transaction) or that is closed, and
runs named statements on it. It never opens a connection of its own.

Supported: SQLAlchemy ``Connection`` / ``Session`` / ``scoped_session`` (sync) and
``AsyncConnection`` / ``AsyncSession`` / ``async_scoped_session``; psycopg 3
``Connection`` / ``AsyncConnection``; psycopg 2 ``connection``; ``sqlite3.Connection``;
PyMySQL ``Connection``; mysqlclient (``MySQLdb``) ``Connection``; and Django's own
``connection`` / ``connections[alias]`` on any of its backends (``_django``). Kinds are
told apart by module name so the optional drivers are imported only when the caller
uses them.

Our statements read their rows by position, so every runner asks its driver for plain
tuples (``_tuple_cursor``), whatever row shape the application set on its connection: a
psycopg ``row_factory=dict_row``, a PyMySQL or mysqlclient ``DictCursor``, a psycopg 2
``RealDictCursor`` or a sqlite3 ``row_factory`` would otherwise reach the plans.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache, partial
from typing import Any, NamedTuple

from outbox.db.dialect import SQLITE, Dialect, dialect_named, on_server
from outbox.db.sql import Statement
from outbox.errors import NoActiveTransaction, UnsupportedConnection

Row = tuple[Any, ...]
_PYMYSQL_IN_TRANS = 1  # SERVER_STATUS_IN_TRANS


class Target(NamedTuple):
    """A caller's connection, ready to run our named statements (one per call: a
    named tuple is built in half a dataclass's time)."""

    dialect: Dialect
    run: Callable[[Statement, Mapping[str, Any]], list[Row]]


class AsyncTarget(NamedTuple):
    dialect: Dialect
    run: Callable[[Statement, Mapping[str, Any]], Awaitable[list[Row]]]


def _module(obj: object) -> str:
    return type(obj).__module__


@cache
def _text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


def adapt(conn: object) -> Target:
    """Recognise a sync connection and check that a write would join a transaction.

    The exact kinds whose check needs nothing but the connection (sqlite3, psycopg 3)
    are remembered by type after the first call (``_by_type``): what was a chain of
    module-name tests, imports and ``isinstance`` checks per ``record()`` is one dict
    lookup. The transaction check itself runs on every call.
    """
    quick = _by_type.get(type(conn))
    if quick is not None:
        return quick(conn)
    if isinstance(conn, sqlite3.Connection):
        if type(conn) is sqlite3.Connection:
            _by_type[sqlite3.Connection] = _sqlite_target
        _check_dbapi(conn)
        return Target(SQLITE, _run_sqlite(conn))
    mod = _module(conn)
    if mod.startswith("django."):
        return _django(conn)
    if mod.startswith(("psycopg2.", "MySQLdb.")):
        return _dbapi2(conn)
    if mod.startswith("sqlalchemy."):
        sa_conn = _sa_connection(conn)
        raw = sa_conn.connection.dbapi_connection
        _check_dbapi(raw)
        version = str(getattr(raw, "server_version", ""))
        dialect = on_server(dialect_named(sa_conn.dialect.name), version)

        def run_sa(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
            result = sa_conn.execute(_text(stmt.named), params)
            return [tuple(r) for r in result.fetchall()] if result.returns_rows else []

        return Target(dialect, run_sa)
    if mod.startswith("psycopg") and _is_psycopg(conn, is_async=False):
        import psycopg

        if type(conn) is psycopg.Connection:
            _by_type[psycopg.Connection] = _psycopg_target
        return _psycopg_target(conn)
    if mod.startswith("pymysql") and _is_pymysql(conn):
        _check_dbapi(conn)
        version = str(getattr(conn, "server_version", ""))
        return Target(on_server(dialect_named("mysql"), version), _run_dbapi(conn))
    raise UnsupportedConnection(_unsupported(conn))


def _sqlite_target(conn: Any) -> Target:
    _check_sqlite(conn)
    return Target(SQLITE, _run_sqlite(conn))


def _psycopg_target(conn: Any) -> Target:
    _check_psycopg(conn)
    return Target(_POSTGRESQL, _run_psycopg(conn))


_POSTGRESQL = dialect_named("postgresql")
# Exact connection types seen by ``adapt``, each with the check-and-wrap it needs.
_by_type: dict[type, Callable[[Any], Target]] = {}


async def adapt_async(conn: object) -> AsyncTarget:
    """Recognise an async connection and check that a write would join a transaction."""
    mod = _module(conn)
    if mod.startswith("sqlalchemy."):
        sa_conn = await _sa_async_connection(conn)
        dialect = dialect_named(sa_conn.dialect.name)
        raw = await sa_conn.get_raw_connection()
        _check_dbapi(raw.dbapi_connection)

        async def run_sa(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
            result = await sa_conn.execute(_text(stmt.named), params)
            return [tuple(r) for r in result.fetchall()] if result.returns_rows else []

        return AsyncTarget(dialect, run_sa)
    if mod.startswith("psycopg") and _is_psycopg(conn, is_async=True):
        _check_dbapi(conn)

        cursor, pgconn = _psycopg_tuples(conn), conn.pgconn  # type: ignore[attr-defined]

        async def run_pg(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
            async with cursor() as cur:
                if pgconn.pipeline_status:  # see _run_psycopg
                    async with conn.pipeline():  # type: ignore[attr-defined]
                        await cur.execute(stmt.driver, params)
                else:
                    await cur.execute(stmt.driver, params)
                return list(await cur.fetchall()) if psycopg_has_rows(cur) else []

        return AsyncTarget(dialect_named("postgresql"), run_pg)
    raise UnsupportedConnection(_unsupported(conn, is_async=True))


def _dbapi2(conn: Any) -> Target:
    """psycopg 2 and mysqlclient (``MySQLdb``): the drivers Django's backends may sit on."""
    mod = _module(conn)
    if mod.startswith("psycopg2."):
        from psycopg2.extensions import connection

        if isinstance(conn, connection):
            _check_psycopg2(conn)
            return Target(dialect_named("postgresql"), _run_dbapi(conn))
    else:
        from MySQLdb.connections import Connection

        if isinstance(conn, Connection):
            _check_mysqlclient(conn)
            return Target(dialect_named("mysql"), _run_dbapi(conn))
    raise UnsupportedConnection(_unsupported(conn))


def _check_psycopg2(raw: Any) -> None:
    from psycopg2.extensions import (
        TRANSACTION_STATUS_IDLE,
        TRANSACTION_STATUS_INERROR,
        TRANSACTION_STATUS_UNKNOWN,
    )

    if raw.closed:
        raise NoActiveTransaction("the psycopg2 connection is closed")
    status = raw.get_transaction_status()
    if status == TRANSACTION_STATUS_UNKNOWN:
        raise NoActiveTransaction("the psycopg2 connection is broken")
    if status == TRANSACTION_STATUS_INERROR:
        raise NoActiveTransaction(_FAILED)
    if raw.autocommit and status == TRANSACTION_STATUS_IDLE:
        raise NoActiveTransaction(_AUTOCOMMIT)


def _check_mysqlclient(raw: Any) -> None:
    """mysqlclient's default is a transaction opened by the first statement; with
    autocommit on, only a transaction begun explicitly (the server says so) holds."""
    if not raw.open:
        raise NoActiveTransaction("the mysqlclient connection is closed")
    if raw.get_autocommit() and not _mysqlclient_in_transaction(raw):
        raise NoActiveTransaction(_AUTOCOMMIT)


def _mysqlclient_in_transaction(raw: Any) -> bool:
    cur = _tuple_cursor(raw)()
    try:
        cur.execute("SELECT @@in_transaction")
        row = cur.fetchone()
    finally:
        cur.close()
    return bool(row and row[0])


def _django(conn: Any) -> Target:
    """Django's ``connection`` (a proxy) or ``connections[alias]``, on any backend.

    Its transaction is Django's: inside ``transaction.atomic()`` (or with autocommit
    turned off) the write joins it, savepoints of nested ``atomic()`` blocks included,
    so a rolled-back inner block takes its intents with it. In autocommit the plain
    ``record()``/``push()`` refuse, as they do on any connection; the Django task
    backend opens its own ``atomic()`` there instead (``outbox.contrib.django``).
    The statements run on the driver's connection underneath, through the same runner
    as that driver's own kind.
    """
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper

    wrapper = connections[conn.alias] if hasattr(conn, "alias") else conn
    if not isinstance(wrapper, BaseDatabaseWrapper):
        raise UnsupportedConnection(_unsupported(conn))
    if wrapper.needs_rollback:
        raise NoActiveTransaction(_FAILED)
    if wrapper.get_autocommit():  # opens the connection if need be
        raise NoActiveTransaction(_AUTOCOMMIT + " (use transaction.atomic())")
    raw = wrapper.connection
    vendor = wrapper.vendor
    if vendor == "sqlite":
        _check_sqlite(raw)
        return Target(SQLITE, _run_sqlite(raw))
    if vendor == "postgresql":
        if _module(raw).startswith("psycopg2"):
            _check_psycopg2(raw)
            return Target(dialect_named("postgresql"), _run_dbapi(raw))
        _check_dbapi(raw)
        return Target(dialect_named("postgresql"), _run_psycopg(raw))
    if vendor == "mysql":
        return Target(dialect_named("mysql"), _run_dbapi(raw))
    raise UnsupportedConnection(
        f"Django's {vendor!r} database backend is not supported; "
        "use PostgreSQL, MySQL/MariaDB or SQLite"
    )


def _is_psycopg(conn: object, *, is_async: bool) -> bool:
    """A psycopg connection of the wanted kind; the other kind is refused by name.

    A sync call on an ``AsyncConnection`` would only create coroutines that never run
    (and report nothing found); an async call on a ``Connection`` would run the
    statement and then fail to await it.
    """
    import psycopg

    wanted, other = psycopg.Connection, psycopg.AsyncConnection
    if is_async:
        wanted, other = other, wanted  # type: ignore[assignment]
    if isinstance(conn, other):
        use = "record()/push()" if is_async else "record_async()/push_async()"
        raise UnsupportedConnection(
            f"a psycopg {type(conn).__name__} is {'sync' if is_async else 'async'}; use {use}"
        )
    return isinstance(conn, wanted)


def _is_pymysql(conn: object) -> bool:
    from pymysql.connections import Connection

    return isinstance(conn, Connection)


def _sa_connection(conn: Any) -> Any:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(conn, scoped_session):  # e.g. Flask-SQLAlchemy's db.session
        conn = conn()
    if isinstance(conn, Session):
        with _failed_session():
            conn = conn.connection()
    if not isinstance(conn, Connection):
        raise UnsupportedConnection(_unsupported(conn))
    if conn.closed or conn.invalidated:
        raise NoActiveTransaction("the SQLAlchemy connection is closed")
    return conn


async def _sa_async_connection(conn: Any) -> Any:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(conn, async_scoped_session):
        conn = conn()
    if isinstance(conn, AsyncSession):
        with _failed_session():
            conn = await conn.connection()
    if not isinstance(conn, AsyncConnection):
        raise UnsupportedConnection(_unsupported(conn, is_async=True))
    if conn.closed or conn.invalidated:
        raise NoActiveTransaction("the SQLAlchemy connection is closed")
    return conn


@contextmanager
def _failed_session() -> Iterator[None]:
    """A session whose flush failed refuses to hand out its connection until rolled back."""
    from sqlalchemy.exc import PendingRollbackError

    try:
        yield
    except PendingRollbackError:
        raise NoActiveTransaction(_FAILED) from None


def _check_dbapi(raw: Any) -> None:
    """Raise ``NoActiveTransaction`` when a write on ``raw`` would commit on its own."""
    driver = getattr(raw, "driver_connection", None)  # SQLAlchemy's async adapters
    if driver is not None and driver is not raw:
        if getattr(raw, "autocommit", False) is True and not _driver_in_transaction(driver):
            raise NoActiveTransaction(_AUTOCOMMIT)
        if _module(driver).startswith(("psycopg", "aiosqlite")):
            _check_dbapi(driver)
        return
    if isinstance(raw, sqlite3.Connection) or _module(raw).startswith("aiosqlite"):
        _check_sqlite(raw)
        return
    mod = _module(raw)
    if mod.startswith("psycopg2"):  # before psycopg 3, whose prefix it shares
        _check_psycopg2(raw)
        return
    if mod.startswith("psycopg"):
        _check_psycopg(raw)
        return
    if mod.startswith("MySQLdb"):
        _check_mysqlclient(raw)
        return
    if mod.startswith("pymysql"):
        if not raw.open:
            raise NoActiveTransaction("the PyMySQL connection is closed")
        if raw.get_autocommit() and not raw.server_status & _PYMYSQL_IN_TRANS:
            raise NoActiveTransaction(_AUTOCOMMIT)


def _check_psycopg(raw: Any) -> None:
    """psycopg 3, sync or async. The status is read from ``pgconn`` (psycopg's
    documented libpq wrapper): ``info`` builds a ConnectionInfo object on every read."""
    if raw.closed:
        raise NoActiveTransaction("the psycopg connection is closed")
    status = raw.pgconn.transaction_status
    idle, failed = _psycopg_idle_failed()
    if status == failed:
        raise NoActiveTransaction(_FAILED)
    if raw.autocommit and status == idle:
        raise NoActiveTransaction(_AUTOCOMMIT)


@cache
def _psycopg_idle_failed() -> tuple[int, int]:
    from psycopg.pq import TransactionStatus

    return int(TransactionStatus.IDLE), int(TransactionStatus.INERROR)


def _check_sqlite(raw: Any) -> None:
    try:
        in_tx = raw.in_transaction
    except sqlite3.ProgrammingError:
        raise NoActiveTransaction("the sqlite3 connection is closed") from None
    if isinstance(raw, sqlite3.Connection):
        try:
            raw.total_changes  # noqa: B018 - raises on a closed connection
        except sqlite3.ProgrammingError:
            raise NoActiveTransaction("the sqlite3 connection is closed") from None
    if in_tx:
        return
    if getattr(raw, "autocommit", None) is True or raw.isolation_level is None:
        raise NoActiveTransaction(_AUTOCOMMIT)


def _driver_in_transaction(driver: Any) -> bool:
    mod = _module(driver)
    if mod.startswith("psycopg"):
        from psycopg.pq import TransactionStatus

        return bool(driver.info.transaction_status == TransactionStatus.INTRANS)
    if mod.startswith("asyncpg"):
        return bool(driver.is_in_transaction())
    return bool(getattr(driver, "in_transaction", False))


def _run_sqlite(conn: sqlite3.Connection) -> Callable[[Statement, Mapping[str, Any]], list[Row]]:
    def run(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
        cur = conn.cursor()
        cur.row_factory = None  # tuples, whatever the connection's row_factory
        try:
            cur.execute(stmt.driver, params)
            return cur.fetchall() if cur.description else []
        finally:
            cur.close()

    return run


def described(cur: Any) -> bool:
    """Did the statement return a result set? (The DB-API way.)"""
    return cur.description is not None


def _run_dbapi(conn: Any) -> Callable[[Statement, Mapping[str, Any]], list[Row]]:
    """Statements on a DB-API connection of psycopg 2, PyMySQL or mysqlclient, each on a
    cursor of its own that returns tuples (``_tuple_cursor``)."""
    new_cursor = _tuple_cursor(conn)

    def run(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
        cur = new_cursor()
        try:
            cur.execute(stmt.driver, params)
            return list(cur.fetchall()) if cur.description is not None else []
        finally:
            cur.close()

    return run


def _tuple_cursor(conn: Any) -> Callable[[], Any]:
    """How to open a cursor that returns plain tuples on ``conn``, a DB-API connection
    of psycopg 2, PyMySQL or mysqlclient (psycopg 3: ``_psycopg_tuples``)."""
    mod = _module(conn)
    if mod.startswith("psycopg2"):
        from psycopg2.extensions import cursor

        return partial(conn.cursor, cursor_factory=cursor)
    if mod.startswith("pymysql"):
        from pymysql.cursors import Cursor

        return partial(conn.cursor, Cursor)
    from MySQLdb.cursors import Cursor as MySQLdbCursor  # the third: mysqlclient

    return partial(conn.cursor, MySQLdbCursor)


def _run_psycopg(conn: Any) -> Callable[[Statement, Mapping[str, Any]], list[Row]]:
    """Statements on a psycopg 3 connection, as ``_run_dbapi`` runs them, also in the
    caller's pipeline mode (``with conn.pipeline():``): there a statement's result comes
    back only at the next sync, and until then it looks as if no row had, so each of ours
    runs in a nested pipeline block, which psycopg syncs on leaving it."""
    cursor, pgconn = _psycopg_tuples(conn), conn.pgconn

    def run(stmt: Statement, params: Mapping[str, Any]) -> list[Row]:
        cur = cursor()
        try:
            if pgconn.pipeline_status:
                with conn.pipeline():
                    cur.execute(stmt.driver, params)
            else:
                cur.execute(stmt.driver, params)
            return list(cur.fetchall()) if cur.rownumber is not None else []
        finally:
            cur.close()

    return run


def _psycopg_tuples(conn: Any) -> Callable[[], Any]:
    """A psycopg 3 connection's (sync or async) cursor with tuple rows. Of the
    connection's own cursor class, so that its binding (server or client side) stays the
    caller's choice; but a raw cursor (``RawCursor``: ``$1`` placeholders) cannot take our
    named parameters, so there it is the plain cursor of the same kind."""
    raw = _raw_cursors()
    if raw and issubclass(conn.cursor_factory, raw):
        import psycopg

        plain = psycopg.AsyncCursor if isinstance(conn, psycopg.AsyncConnection) else psycopg.Cursor
        return partial(plain, conn, row_factory=_tuple_row())
    return partial(conn.cursor, row_factory=_tuple_row())


@cache
def _raw_cursors() -> tuple[type, ...]:
    """psycopg's raw cursor classes (psycopg 3.2+; none before)."""
    import psycopg

    return tuple(
        c for c in (getattr(psycopg, "RawCursor", None), getattr(psycopg, "AsyncRawCursor", None))
        if c is not None
    )


@cache
def _tuple_row() -> Any:
    from psycopg.rows import tuple_row

    return tuple_row


def psycopg_has_rows(cur: Any) -> bool:
    """``rownumber`` is None unless rows came back; ``description`` would build Column
    objects on every call (6 of the ~120 us a ``record()`` takes on a local server).
    Our own connections use it too (``Connection.execute``)."""
    return cur.rownumber is not None


_FAILED = "the connection's transaction has failed; roll it back and start again"
_AUTOCOMMIT = (
    "the connection is in autocommit mode outside a transaction, so the intent would "
    "commit on its own; begin a transaction first"
)


def _unsupported(conn: object, is_async: bool = False) -> str:
    kinds = (
        "SQLAlchemy AsyncConnection/AsyncSession or psycopg AsyncConnection"
        if is_async
        else "SQLAlchemy Connection/Session, psycopg (3 or 2) connection, sqlite3.Connection, "
        "PyMySQL or mysqlclient Connection, or Django's connection"
    )
    return f"cannot write on a {type(conn).__module__}.{type(conn).__name__}; expected a {kinds}"
