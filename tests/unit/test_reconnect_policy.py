"""Which failures are a lost connection, and the pause a service takes after each."""

from __future__ import annotations

import sqlite3

import psycopg
import pymysql
import pytest

from outbox.db.errors import is_connection_lost
from outbox.db.reconnect import Reconnect
from outbox.errors import DatabaseError


def _ours(cause: BaseException, operation: str = "claim") -> DatabaseError:
    """As ``translated`` raises it: ours, with the driver's error as the cause."""
    try:
        raise DatabaseError("x failed", operation=operation) from cause
    except DatabaseError as exc:
        return exc


LOST = [
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CrashShutdown("crash"),
    psycopg.errors.CannotConnectNow("starting up"),
    psycopg.errors.ConnectionFailure("08006"),
    psycopg.OperationalError("the connection is closed"),  # no SQLSTATE: gone before a word
    pymysql.err.OperationalError(2013, "Lost connection to server during query"),
    pymysql.err.OperationalError(2006, "server has gone away"),
    pymysql.err.OperationalError(1927, "Connection was killed"),
    pymysql.err.InterfaceError(0, ""),
    ConnectionResetError(104, "Connection reset by peer"),
    BrokenPipeError(32, "Broken pipe"),
]
NOT_LOST = [
    psycopg.errors.SerializationFailure("40001"),
    psycopg.errors.UndefinedTable("42P01"),
    psycopg.errors.QueryCanceled("57014"),  # a statement timeout: the session lives on
    pymysql.err.OperationalError(1213, "Deadlock found"),
    pymysql.err.ProgrammingError(1146, "Table doesn't exist"),
    sqlite3.OperationalError("database is locked"),
    ValueError("not a database error"),
]


@pytest.mark.parametrize("exc", LOST, ids=lambda e: type(e).__name__)
def test_a_connection_the_server_or_network_ended_is_lost(exc: BaseException) -> None:
    assert is_connection_lost(exc)
    assert is_connection_lost(_ours(exc))


@pytest.mark.parametrize("exc", NOT_LOST, ids=lambda e: type(e).__name__)
def test_other_failures_are_not_a_lost_connection(exc: BaseException) -> None:
    assert not is_connection_lost(exc)
    assert not is_connection_lost(_ours(exc))


def test_a_connection_that_could_not_be_opened_was_never_lost() -> None:
    refused = psycopg.OperationalError("connection failed: Connection refused")
    assert not is_connection_lost(_ours(refused, operation="connect"))


def test_a_lost_working_connection_is_retried_at_once_and_a_failed_reconnect_backs_off() -> None:
    r = Reconnect(0.5, 4.0)
    lost = _ours(psycopg.errors.AdminShutdown("bye"))
    refused = _ours(psycopg.OperationalError("refused"), operation="connect")
    r.working()
    assert r.pause(lost) == 0
    assert [r.pause(refused) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    r.working()
    assert r.pause(lost) == 0  # the backoff started over
    assert r.pause(lost) == 0.5  # lost again before the new connection did any work


def test_before_any_connection_worked_every_failure_backs_off() -> None:
    r = Reconnect(0.2, 0.2)
    assert r.pause(_ours(psycopg.errors.AdminShutdown("bye"))) == 0.2
    r.working()
    assert r.pause(_ours(psycopg.errors.UndefinedTable("42P01"))) == 0.2


def test_a_first_pause_above_the_cap_is_the_cap() -> None:
    """A relay polling every 60 s with reconnect_max=30 waits 30 s after a failure."""
    r = Reconnect(60.0, 30.0)
    assert [r.pause(ValueError()) for _ in range(2)] == [30.0, 30.0]
