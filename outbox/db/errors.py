"""Driver errors, translated in one place.

Every driver exception that leaves ``outbox.db`` passes through ``translate`` (our own
connections) or ``translate_for_caller`` (the caller's connection in ``record()`` and
``push()``). ``is_retryable`` decides which are confirmed-safe to retry: the database
has certainly rolled the transaction back (a deadlock victim, a serialisation failure)
or refused to start writing (SQLite BUSY/LOCKED). A lost connection is never retried:
during COMMIT we cannot know whether the transaction landed, so the next run reads the
durable state instead.

``is_connection_lost`` tells a connection the server or the network ended (a failover,
an operator's ``pg_terminate_backend`` or ``KILL``, a reset socket) from every other
failure; the services' reconnect policy (``outbox.db.reconnect``) asks it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from outbox.errors import (
    DatabaseError,
    OutboxError,
    ReadOnlyDatabase,
    RetryTransaction,
    TablesMissing,
)

# PostgreSQL SQLSTATEs: serialization_failure, deadlock_detected.
PG_RETRYABLE = frozenset({"40001", "40P01"})
# MariaDB/MySQL error numbers: ER_LOCK_DEADLOCK, ER_CHECKREAD (MariaDB's "record has
# changed since last read"), ER_LOCK_WAIT_TIMEOUT. A lock wait timeout rolls back only
# the statement, but every caller of the retry loop rolls the whole transaction back
# before trying again, which makes it safe.
MYSQL_RETRYABLE = frozenset({1213, 1020, 1205})
SQLITE_RETRYABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# PostgreSQL undefined_table, MariaDB ER_NO_SUCH_TABLE. SQLite has no code for it (its
# generic SQLITE_ERROR), so there the one fixed text SQLite gives, "no such table: <name>",
# is read, and only for one of our tables (is_missing_table).
MISSING_TABLE = frozenset({"42P01", 1146})
SQLITE_NO_SUCH_TABLE = "no such table: outbox_"
# What refuses to write and stays so (ReadOnlyDatabase). PostgreSQL: read_only_sql_transaction
# (default_transaction_read_only, a hot standby), insufficient_privilege. MariaDB/MySQL:
# ER_OPTION_PREVENTS_STATEMENT (read_only), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION,
# ER_TABLEACCESS_DENIED_ERROR and ER_COLUMNACCESS_DENIED_ERROR (no grant). SQLite:
# SQLITE_READONLY and its extended codes.
PG_READ_ONLY = frozenset({"25006", "42501"})
MYSQL_READ_ONLY = frozenset({1290, 1792, 1142, 1143})
# PostgreSQL: admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout,
# idle_in_transaction_session_timeout; and the whole class 08, connection_exception.
PG_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})
PG_CONNECTION_CLASS = "08"
# MariaDB/MySQL: ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED, CR_SERVER_GONE_ERROR,
# CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED, MySQL 8's ER_CLIENT_INTERACTION_TIMEOUT.
MYSQL_CONNECTION_LOST = frozenset({1053, 1927, 2006, 2013, 2055, 4031})
# PostgreSQL invalid_text_representation: a ::json cast met text that is not JSON.
INVALID_TEXT = "22P02"


def is_retryable(exc: BaseException) -> bool:
    """True when ``exc`` proves the transaction was rolled back by the database."""
    if _is_pymysql_error(exc):
        # Checked first: PyMySQL errors carry a ``sqlstate`` too, and it is no guide
        # (a lock wait timeout and ER_CHECKREAD are both the generic HY000).
        return bool(exc.args) and exc.args[0] in MYSQL_RETRYABLE
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in PG_RETRYABLE
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:
            return False
        return code & 0xFF in SQLITE_RETRYABLE
    cause = getattr(exc, "orig", None)  # SQLAlchemy wraps the driver error
    return cause is not None and cause is not exc and is_retryable(cause)


def is_connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` says a connection that was open is gone: the server ended the
    session (SQLSTATE 57P01/57P02/57P03, MariaDB's "connection killed", 2013 "lost
    connection", 2006 "server has gone away") or the socket was reset or closed.

    A connection that could not be opened (``DatabaseError`` of operation ``"connect"``)
    was never lost: that is a reconnect failing, which the caller backs off from.
    """
    if isinstance(exc, DatabaseError):
        if exc.operation == "connect":
            return False
        cause = exc.__cause__
        return cause is not None and cause is not exc and is_connection_lost(cause)
    if isinstance(exc, ConnectionError):  # reset, aborted, broken pipe
        return True
    if _is_pymysql_error(exc):
        if type(exc).__name__ == "InterfaceError":  # PyMySQL's "the connection is closed"
            return True
        return bool(exc.args) and exc.args[0] in MYSQL_CONNECTION_LOST
    if type(exc).__module__.startswith("psycopg"):
        sqlstate = getattr(exc, "sqlstate", None)
        if isinstance(sqlstate, str):
            return sqlstate in PG_CONNECTION_LOST or sqlstate.startswith(PG_CONNECTION_CLASS)
        # No SQLSTATE: psycopg's own "the connection is closed", "server closed the
        # connection unexpectedly" (the server's message never arrived).
        return type(exc).__name__ in ("OperationalError", "InterfaceError")
    cause = getattr(exc, "orig", None) or exc.__cause__  # SQLAlchemy wraps the driver error
    return cause is not None and cause is not exc and is_connection_lost(cause)


def error_code(exc: BaseException) -> str | int | None:
    """The most specific code the driver gives: MariaDB's error number, PostgreSQL's
    SQLSTATE, SQLite's error name; ``None`` when there is none."""
    if _is_pymysql_error(exc):
        return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    code = getattr(exc, "sqlstate", None) or getattr(exc, "sqlite_errorname", None)
    if isinstance(code, str):
        return code
    cause = getattr(exc, "orig", None)  # SQLAlchemy wraps the driver error
    return error_code(cause) if cause is not None and cause is not exc else None


def is_missing_table(exc: BaseException) -> bool:
    """True when ``exc`` says a table is not there (on SQLite: one of ours)."""
    if error_code(exc) in MISSING_TABLE:
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return str(exc).startswith(SQLITE_NO_SUCH_TABLE)
    cause = getattr(exc, "orig", None)  # SQLAlchemy wraps the driver error
    return cause is not None and cause is not exc and is_missing_table(cause)


def is_read_only(exc: BaseException) -> bool:
    """True when ``exc`` says the database refuses to write, which waiting does not fix:
    a read-only file, server or transaction, or a missing privilege (``PG_READ_ONLY``,
    ``MYSQL_READ_ONLY``, ``SQLITE_READONLY``)."""
    code = error_code(exc)
    if isinstance(code, int):
        return code in MYSQL_READ_ONLY
    return code is not None and (code in PG_READ_ONLY or code.startswith("SQLITE_READONLY"))


def translate(exc: BaseException, operation: str) -> DatabaseError:
    """A ``DatabaseError`` naming the operation and the driver's error class and code:
    ``TablesMissing`` and ``ReadOnlyDatabase`` for the two that no retry fixes.

    The driver's own message is left on ``__cause__``: it can quote row values.
    """
    code = error_code(exc)
    said = f"{operation} failed: {type(exc).__name__}" + (f" ({code})" if code else "")
    if is_missing_table(exc):
        return TablesMissing(
            f"{said}; the outbox tables are missing: create them with `outbox migrate`",
            operation=operation,
            code=code,
        )
    if is_read_only(exc):
        return ReadOnlyDatabase(
            f"{said}; the database refuses writes (a read-only file, server or "
            "transaction, or a user without the privilege)",
            operation=operation,
            code=code,
        )
    return DatabaseError(said, operation=operation, code=code)


def translate_for_caller(exc: BaseException, operation: str) -> OutboxError:
    """As ``translate``, for a statement on the caller's connection: a deadlock,
    serialisation failure or busy database dooms the caller's transaction.

    Not every such error has rolled it back already (SQLite BUSY and a MariaDB lock wait
    timeout undo only the statement), so the message asks for the rollback explicitly.
    """
    if is_retryable(exc):
        return RetryTransaction(
            f"{operation}: the database refused the write ({type(exc).__name__}); "
            "roll the transaction back and run all of it again"
        )
    return translate(exc, operation)


@contextmanager
def translated(operation: str, *, caller: bool = False) -> Iterator[None]:
    """Driver errors raised inside become ours (the driver's stays as ``__cause__``)."""
    try:
        yield
    except OutboxError:
        raise
    except Exception as exc:
        raise (translate_for_caller if caller else translate)(exc, operation) from exc


def _is_pymysql_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("pymysql")
