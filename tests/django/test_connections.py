"""record() and push() on the connections Django uses: its own ``connection`` wrappers on
every backend (nested ``atomic()`` savepoints included) and the plain DB-API connections
of the drivers Django's backends sit on (psycopg 2, mysqlclient), outside Django."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from django.db import connections, transaction
from sqlalchemy.engine import make_url

from outbox import Job, record
from outbox.db.connection import Connection
from outbox.errors import DatabaseError, NoActiveTransaction
from outbox.queue import push
from tests.fixtures.records import counts

JOB = Job("notes.index", {"note_id": 1}, queue="search")
TABLES = ("outbox_messages", "outbox_jobs")


def _written(conn: Connection) -> dict[str, int]:
    return counts(conn, TABLES)


def test_inside_atomic_a_commit_keeps_both_writes(django_alias: str, conn: Connection) -> None:
    with transaction.atomic(using=django_alias):
        record(connections[django_alias], "k-1", JOB)
        push(connections[django_alias], JOB)
    assert _written(conn) == {"outbox_messages": 1, "outbox_jobs": 1}


def test_a_rollback_takes_both_writes_with_it(django_alias: str, conn: Connection) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic(using=django_alias):
        record(connections[django_alias], "k-1", JOB)
        push(connections[django_alias], JOB)
        raise Boom
    assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}


def test_a_rolled_back_savepoint_takes_only_its_own_intents(
    django_alias: str, conn: Connection
) -> None:
    c = connections[django_alias]
    with transaction.atomic(using=django_alias):
        push(c, JOB)
        try:
            with transaction.atomic(using=django_alias):
                record(c, "inner", JOB)
                push(c, JOB)
                raise KeyError("inner block fails")
        except KeyError:
            pass
        with transaction.atomic(using=django_alias):
            record(c, "kept", JOB)
    assert _written(conn) == {"outbox_messages": 1, "outbox_jobs": 1}


def test_the_default_connection_proxy_is_recognised(django_alias: str, conn: Connection) -> None:
    from django.db import connection  # the proxy of alias "default"

    with transaction.atomic(), pytest.raises(DatabaseError, match=r"^push failed"):
        push(connection, JOB)  # "default" is SQLite in memory, never migrated: it got there


@pytest.mark.parametrize("call", ["record", "push"])
def test_in_autocommit_the_plain_calls_refuse_and_write_nothing(
    django_alias: str, conn: Connection, call: str
) -> None:
    c = connections[django_alias]
    with pytest.raises(NoActiveTransaction, match=r"autocommit.*transaction\.atomic\(\)"):
        record(c, "k-1", JOB) if call == "record" else push(c, JOB)
    assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}


def test_a_failed_atomic_block_is_refused(django_alias: str, conn: Connection) -> None:
    c = connections[django_alias]
    with transaction.atomic(using=django_alias):
        c.set_rollback(True)
        with pytest.raises(NoActiveTransaction, match="failed"):
            push(c, JOB)
    assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}


def _second_driver(db_url: str) -> Any:
    """The driver a Django backend may use beside the project's own (autocommit off)."""
    u = make_url(db_url)
    kind = u.get_backend_name()
    if kind == "sqlite":
        return sqlite3.connect(u.database or "", timeout=30)
    if kind.startswith("postgres"):
        import psycopg2

        return psycopg2.connect(
            host=u.host, port=u.port, user=u.username, password=u.password or "",
            dbname=u.database, **{k: str(v) for k, v in u.query.items()},
        )
    import MySQLdb

    return MySQLdb.connect(
        host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
        password=u.password or "", database=u.database or "", charset="utf8mb4",
    )


def test_plain_dbapi_connections_write_in_their_transaction(
    db_url: str, database: Any, conn: Connection
) -> None:
    raw = _second_driver(db_url)
    try:
        record(raw, "k-1", JOB)
        push(raw, JOB)
        raw.rollback()
        assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}
        first = record(raw, "k-1", JOB)
        assert record(raw, "k-1", JOB) == first  # the same key, the same job: its id
        push(raw, JOB)
        raw.commit()
        assert _written(conn) == {"outbox_messages": 1, "outbox_jobs": 1}
    finally:
        raw.close()


def _autocommit(raw: Any) -> None:
    if isinstance(raw, sqlite3.Connection):
        raw.isolation_level = None
    elif type(raw).__module__.startswith("psycopg2"):
        raw.autocommit = True
    else:
        raw.autocommit(True)


def test_plain_dbapi_connections_in_autocommit_are_refused(
    db_url: str, database: Any, conn: Connection
) -> None:
    raw = _second_driver(db_url)
    try:
        _autocommit(raw)
        with pytest.raises(NoActiveTransaction, match="autocommit"):
            push(raw, JOB)
    finally:
        raw.close()
    assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}


def test_in_autocommit_a_transaction_begun_explicitly_is_joined(
    db_url: str, database: Any, conn: Connection
) -> None:
    raw = _second_driver(db_url)
    try:
        _autocommit(raw)
        cur = raw.cursor()
        cur.execute("BEGIN")
        push(raw, JOB)
        cur.execute("ROLLBACK")
        assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 0}
        cur.execute("BEGIN")
        push(raw, JOB)
        cur.execute("COMMIT")
        cur.close()
    finally:
        raw.close()
    assert _written(conn) == {"outbox_messages": 0, "outbox_jobs": 1}


def test_a_closed_plain_connection_is_refused(db_url: str, database: Any) -> None:
    raw = _second_driver(db_url)
    raw.close()
    with pytest.raises(NoActiveTransaction, match="closed"):
        push(raw, JOB)
