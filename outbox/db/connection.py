"""Our own database connections: the relay's, the worker's, the CLI's.

``Database`` turns a URL into connections; ``Connection`` runs named statements and
owns the one transaction-and-retry loop (``transact``) that every internal,
database-only transaction of the project goes through.

Connections sit in autocommit mode outside ``transaction()``: a lone read commits at
once instead of leaving a session idle in a transaction. ``transaction()`` opens an
explicit one (``BEGIN IMMEDIATE`` on SQLite, so the writer lock is taken up front and
a busy database shows up at BEGIN, where retrying is safe).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from sqlalchemy.engine import URL, make_url

from outbox import metrics
from outbox.config import settings
from outbox.db.adapters import described, psycopg_has_rows
from outbox.db.dialect import MYSQL, POSTGRESQL, SQLITE, Dialect
from outbox.db.errors import error_code, is_retryable, translate
from outbox.db.sql import Statement, queries
from outbox.db.url import (
    check_sqlite_query,
    describe,
    libpq_multi_host,
    mysql_args,
    postgresql_args,
    scrub,
)
from outbox.errors import ConfigurationError, DatabaseError, OutboxError
from outbox.log import get_logger

if TYPE_CHECKING:
    from outbox.db.driver import Driver

T = TypeVar("T")
Row = tuple[Any, ...]

MAX_ATTEMPTS = 4
RETRY_BASE_S = 0.02
RETRY_CAP_S = 0.5
SQLITE_BUSY_TIMEOUT_MS = 5_000
ACCEPTED_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")

log = get_logger("outbox.db")


def _sqlite_sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _sqlite_regexp(pattern: str | None, value: str | None) -> bool | None:
    """SQLite's ``x REGEXP y`` calls ``regexp(y, x)``; it ships no implementation."""
    if pattern is None or value is None:
        return None
    return _compiled(pattern).search(value) is not None


class Connection:
    """One raw DB-API connection with its dialect's named statements."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect
        self._sql = queries(dialect)
        self._in_tx = False
        self._has_rows = psycopg_has_rows if dialect is POSTGRESQL else described
        self._driver: Driver | None = None

    @property
    def driver(self) -> Driver:
        """This connection's typed operations (the dialect's ``Driver``)."""
        if self._driver is None:
            from outbox.db.drivers import driver_class

            self._driver = driver_class(self.dialect)(self)
        return self._driver

    def statement(self, name: str) -> Statement:
        """The named statement of this connection's dialect (KeyError naming it if absent)."""
        try:
            return self._sql[name]
        except KeyError:
            raise KeyError(f"no query {name!r} for {self.dialect.name}") from None

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run the named statement; return its rows (empty when it returns none)."""
        cur = self._run(self.statement(name).driver, params)
        try:
            return list(cur.fetchall()) if self._has_rows(cur) else []
        finally:
            cur.close()

    def execute_count(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run the named statement; return how many rows it changed."""
        cur = self._run(self.statement(name).driver, params)
        try:
            return int(cur.rowcount)
        finally:
            cur.close()

    def execute_sql(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> list[Row]:
        """Run driver-style SQL that is not a named statement (DDL, probes)."""
        cur = self.raw.cursor()
        try:
            if params is None:
                cur.execute(sql)
            else:
                cur.execute(sql, params)
            return list(cur.fetchall()) if self._has_rows(cur) else []
        finally:
            cur.close()

    def _run(self, sql: str, params: Mapping[str, Any] | None) -> Any:
        cur = self.raw.cursor()
        if params is None:
            cur.execute(sql)
        else:
            cur.execute(sql, self._adapt(params))
        return cur

    def _adapt(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        # SQLite has no arrays: lists travel as JSON text, read back with json_each().
        if self.dialect is SQLITE and any(isinstance(v, (list, tuple)) for v in params.values()):
            return {
                k: orjson.dumps(v).decode() if isinstance(v, (list, tuple)) else v
                for k, v in params.items()
            }
        return params

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One explicit transaction: commit on success, roll back on any exception.

        A COMMIT that fails is followed by a ROLLBACK too: SQLite leaves the transaction
        open (and its writer lock held) when COMMIT returns BUSY or meets a deferred
        constraint, and the connection must not carry it into the next ``transaction()``.
        """
        if self._in_tx:
            raise RuntimeError("transactions do not nest")
        self._begin()
        self._in_tx = True
        try:
            yield self
            self._commit()
        except BaseException:
            self._rollback_quietly()
            raise
        finally:
            self._in_tx = False

    def transact(self, fn: Callable[[Connection], T], *, operation: str) -> T:
        """Run ``fn`` in a transaction, retrying confirmed deadlocks and BUSY.

        At most ``MAX_ATTEMPTS`` in all, each after a rollback and a fully jittered
        exponential pause. Anything else, including a connection lost during COMMIT,
        propagates as ``DatabaseError``: the next run reads the durable state.
        """

        def in_transaction() -> T:
            with self.transaction():
                return fn(self)

        return self._retrying(in_transaction, operation)

    def atomic(self, fn: Callable[[Connection], T], *, operation: str) -> T:
        """Run ``fn``, which issues ONE statement, under the same retry policy.

        On a server a lone statement in autocommit is its own transaction, so BEGIN and
        COMMIT are skipped (one round trip instead of three). SQLite goes through
        ``transact``: a statement that reads before it writes can fail to upgrade its
        lock with a BUSY that no busy timeout resolves, and BEGIN IMMEDIATE avoids it.
        """
        if self.dialect is SQLITE:
            return self.transact(fn, operation=operation)
        return self._retrying(lambda: fn(self), operation)

    def read(self, fn: Callable[[Connection], T], *, operation: str) -> T:
        """Run ``fn``, which only reads, under the same retry policy, outside any
        transaction: unlike ``atomic`` it takes no writer lock on SQLite, so listings and
        scans never queue behind workers."""
        return self._retrying(lambda: fn(self), operation)

    def _retrying(self, attempt_once: Callable[[], T], operation: str) -> T:
        """The retry policy itself: only ``is_retryable`` errors, ``MAX_ATTEMPTS`` in all."""
        attempt = 1
        while True:
            try:
                return attempt_once()
            except OutboxError:
                raise
            except Exception as exc:
                if not is_retryable(exc) or attempt >= MAX_ATTEMPTS:
                    raise translate(exc, operation) from exc
                pause = random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt))
                log.warning(
                    "db.retry",
                    operation=operation,
                    attempt=attempt,
                    error=type(exc).__name__,
                    pause_ms=round(pause * 1000, 1),
                )
                metrics.transaction_retried(operation)
                time.sleep(pause)
                attempt += 1

    def _begin(self) -> None:
        if self.dialect is SQLITE:
            self.raw.execute("BEGIN IMMEDIATE")
        elif self.dialect is MYSQL:
            self.raw.begin()
        else:
            self.raw.execute("BEGIN")

    def _commit(self) -> None:
        if self.dialect is SQLITE or self.dialect is POSTGRESQL:
            self.raw.execute("COMMIT")
        else:
            self.raw.commit()

    def _rollback_quietly(self) -> None:
        try:
            if self.dialect is MYSQL:
                self.raw.rollback()
            else:
                self.raw.execute("ROLLBACK")
        except Exception:  # the connection may be gone; the database rolls back for us
            log.debug("db.rollback_failed")

    def close(self) -> None:
        """Close the driver connection; an open transaction is rolled back by the server."""
        try:
            self.raw.close()
        except Exception:
            log.debug("db.close_failed")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Database:
    """Where the data lives, parsed from a URL; hands out ``Connection`` objects.

    Accepted: ``sqlite:///path.db`` (``sqlite://`` is in memory),
    ``postgresql://user:pw@host:port/db`` (psycopg 3), ``mysql://`` or ``mariadb://``
    (PyMySQL). A ``+driver`` suffix is accepted and ignored.
    """

    def __init__(self, url: str, *, sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
        self.url = parse_url(url)
        self.dialect = _dialect_of(self.url)
        if self.dialect is not SQLITE:
            self._driver_args()  # refuse a bad URL parameter now, not at the first connection
        else:
            check_sqlite_query(self.url)
        self.sqlite_busy_timeout_ms = sqlite_busy_timeout_ms

    def describe(self) -> str:
        """The URL with any password hidden, for messages and logs."""
        return describe(self.url)

    def connect(self) -> Connection:
        """A new connection; a driver's failure becomes ``DatabaseError`` naming the URL."""
        try:
            raw = self._connect_raw()
        except OutboxError:
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            first = scrub(self.url, first)
            raise DatabaseError(
                f"cannot connect to {self.describe()}: {first}",
                operation="connect",
                code=error_code(exc),
            ) from exc
        return Connection(raw, self.dialect)

    def _connect_raw(self) -> Any:
        if self.dialect is SQLITE:
            return self._connect_sqlite()
        if self.dialect is POSTGRESQL:
            return self._connect_postgresql()
        return self._connect_mysql()

    def _connect_sqlite(self) -> sqlite3.Connection:
        raw = sqlite3.connect(
            self.url.database or ":memory:",
            isolation_level=None,
            timeout=self.sqlite_busy_timeout_ms / 1000,
            check_same_thread=False,
        )
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute(f"PRAGMA busy_timeout={int(self.sqlite_busy_timeout_ms)}")
        # SQLite lacks these; the relay verifies rows in SQL with them.
        raw.create_function("outbox_sha256", 1, _sqlite_sha256, deterministic=True)
        raw.create_function("regexp", 2, _sqlite_regexp, deterministic=True)
        return raw

    def _driver_args(self) -> dict[str, Any]:
        return postgresql_args(self.url) if self.dialect is POSTGRESQL else mysql_args(self.url)

    def _connect_postgresql(self) -> Any:
        import psycopg

        args = self._driver_args()
        if settings.pooler:  # a prepared statement would outlive the pooler's transaction
            args["prepare_threshold"] = None
        return psycopg.connect(autocommit=True, **args)

    def _connect_mysql(self) -> Any:
        import pymysql

        raw = pymysql.connect(autocommit=True, **self._driver_args())
        # Gap locks under REPEATABLE READ turn concurrent claims into deadlocks.
        with raw.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return raw


def parse_url(url: str) -> URL:
    """The URL parsed; unparseable text is a ``ConfigurationError`` (never echoing it,
    since it may hold a password)."""
    try:
        return make_url(libpq_multi_host(url))
    except Exception as exc:
        raise ConfigurationError(
            "cannot parse the database URL; expected e.g. sqlite:///outbox.db or "
            "postgresql://user@host/db"
        ) from exc


def _dialect_of(url: URL) -> Dialect:
    scheme = url.drivername.split("+", 1)[0]
    if scheme == "sqlite":
        return SQLITE
    if scheme in ("postgresql", "postgres"):
        return POSTGRESQL
    if scheme in ("mysql", "mariadb"):
        return MYSQL
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r}; accepted: {', '.join(ACCEPTED_SCHEMES)}"
    )


class LazyConnection:
    """The one connection a long-running service owns: opened on first use, dropped
    after a database error (the next use opens a fresh one), closed with the service."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._conn: Connection | None = None

    def get(self) -> Connection:
        if self._conn is None:
            self._conn = self.database.connect()
        return self._conn

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def use(self, conn: Connection) -> None:
        """Adopt ``conn`` as the connection (a fault test hands in one that fails on cue)."""
        self.drop()
        self._conn = conn
