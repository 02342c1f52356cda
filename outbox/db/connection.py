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

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from outbox.db.dialect import Dialect
from outbox.db.driver import Backend, ConnectOptions, Driver, Row
from outbox.db.drivers import backend_for, backend_of
from outbox.db.errors import error_code, is_retryable, translate
from outbox.db.sql import Statement, queries
from outbox.db.url import URL, describe, libpq_multi_host, make_url, scrub
from outbox.errors import ConfigurationError, DatabaseError, OutboxError
from outbox.log import get_logger

T = TypeVar("T")
OnRetry = Callable[[str], None]

MAX_ATTEMPTS = 4
RETRY_BASE_S = 0.02
RETRY_CAP_S = 0.5
SQLITE_BUSY_TIMEOUT_MS = 5_000

log = get_logger("outbox.db")


class Connection:
    """One raw DB-API connection with its dialect's named statements.

    What differs per dialect (BEGIN/COMMIT/ROLLBACK, parameter binding, the driver) is
    the dialect's ``Backend``, from the factory in ``drivers.py``. ``on_retry`` is called
    with the operation's name each time the retry policy runs one again.
    """

    def __init__(self, raw: Any, dialect: Dialect, *, on_retry: OnRetry | None = None) -> None:
        self.raw = raw
        self.dialect = dialect
        self._backend: Backend = backend_of(dialect)
        self._sql = queries(dialect)
        self._in_tx = False
        self._has_rows = self._backend.has_rows
        self._adapt = self._backend.adapt
        self._on_retry = on_retry
        self._driver: Driver | None = None

    @property
    def driver(self) -> Driver:
        """This connection's typed operations (the dialect's ``Driver``)."""
        if self._driver is None:
            self._driver = self._backend.driver(self)
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
            cur.execute(sql, params if self._adapt is None else self._adapt(params))
        return cur

    def adapt(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """``params`` as the dialect's driver binds them (SQLite: lists as JSON text)."""
        return params if self._adapt is None else self._adapt(params)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One explicit transaction: commit on success, roll back on any exception.

        A COMMIT that fails is followed by a ROLLBACK too: SQLite leaves the transaction
        open (and its writer lock held) when COMMIT returns BUSY or meets a deferred
        constraint, and the connection must not carry it into the next ``transaction()``.
        """
        if self._in_tx:
            raise RuntimeError("transactions do not nest")
        self._backend.begin(self.raw)
        self._in_tx = True
        try:
            yield self
            self._backend.commit(self.raw)
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

    def transact_at_once(
        self, steps: Sequence[tuple[str, Mapping[str, Any]]], *, operation: str
    ) -> list[Row]:
        """``steps`` (named statements and their parameters) in one transaction; the last
        one's rows. Where the driver can (``Backend.pipeline``: psycopg's pipeline mode),
        BEGIN, the steps and COMMIT go out together and their answers come back together:
        one round trip instead of one each, which on a busy machine is a wake-up of the
        server and one of ours each. The server still runs each statement after the one
        before, in a snapshot of its own, so a step sees what an earlier one waited for (a
        lock). Same retry policy as ``transact``."""
        pipeline = self._backend.pipeline
        if pipeline is None:
            return self.transact(
                lambda c: [c.execute(name, params) for name, params in steps][-1],
                operation=operation,
            )
        return self._retrying(lambda: self._at_once(pipeline, steps), operation)

    def _at_once(
        self,
        pipeline: Callable[[Any], AbstractContextManager[Any]],
        steps: Sequence[tuple[str, Mapping[str, Any]]],
    ) -> list[Row]:
        if self._in_tx:
            raise RuntimeError("transactions do not nest")
        try:
            with pipeline(self.raw):
                self._backend.begin(self.raw)
                sent = [self._run(self.statement(name).driver, p) for name, p in steps]
                self._backend.commit(self.raw)
        except BaseException:
            self._rollback_quietly()  # a failed step leaves the transaction open, aborted
            raise
        try:
            return list(sent[-1].fetchall()) if self._has_rows(sent[-1]) else []
        finally:
            for cur in sent:
                cur.close()

    def atomic(self, fn: Callable[[Connection], T], *, operation: str) -> T:
        """Run ``fn``, which issues ONE statement, under the same retry policy.

        On a server a lone statement in autocommit is its own transaction, so BEGIN and
        COMMIT are skipped (one round trip instead of three). SQLite goes through
        ``transact``: a statement that reads before it writes can fail to upgrade its
        lock with a BUSY that no busy timeout resolves, and BEGIN IMMEDIATE avoids it.
        """
        if self._backend.atomic_in_transaction:
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
                if self._on_retry is not None:
                    self._on_retry(operation)
                time.sleep(pause)
                attempt += 1

    def _rollback_quietly(self) -> None:
        try:
            self._backend.rollback(self.raw)
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
    (PyMySQL). A ``+driver`` suffix is accepted and ignored. A bad URL parameter is
    refused here, not at the first connection. ``on_retry`` reaches every connection
    (see ``Connection``): the CLI counts retried transactions with it.
    """

    def __init__(
        self,
        url: str,
        *,
        sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.url = parse_url(url)
        backend = backend_for(self.url.drivername)
        self.dialect = backend.dialect
        self.sqlite_busy_timeout_ms = sqlite_busy_timeout_ms
        self.on_retry = on_retry
        self._connect_raw = backend.connector(self.url, ConnectOptions(sqlite_busy_timeout_ms))

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
        return Connection(raw, self.dialect, on_retry=self.on_retry)


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
