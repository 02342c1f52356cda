"""Which driver errors are confirmed-safe to retry, decided in one place.

A retry is safe only when the database has certainly rolled the transaction back:
a deadlock victim, a serialisation failure, or SQLite refusing to start writing
(BUSY/LOCKED). A lost connection is never retried here: during COMMIT we cannot know
whether the transaction landed, so the next run reads the durable state instead.
"""

from __future__ import annotations

import sqlite3

# PostgreSQL SQLSTATEs: serialization_failure, deadlock_detected.
PG_RETRYABLE = frozenset({"40001", "40P01"})
# MariaDB/MySQL error numbers: ER_LOCK_DEADLOCK, ER_CHECKREAD (MariaDB's "record has
# changed since last read"), ER_LOCK_WAIT_TIMEOUT. A lock wait timeout rolls back only
# the statement, but every caller of the retry loop rolls the whole transaction back
# before trying again, which makes it safe.
MYSQL_RETRYABLE = frozenset({1213, 1020, 1205})
SQLITE_RETRYABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


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


def _is_pymysql_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("pymysql")
