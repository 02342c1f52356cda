"""A connection kind ``adapt`` has already recognised (remembered by its exact type:
psycopg 3 and sqlite3) is still checked on every call: autocommit outside a
transaction, a failed transaction and a closed connection are refused with the same
errors, and nothing is written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox import Job, push, record
from outbox.db import adapters
from outbox.db.connection import Connection
from outbox.errors import NoActiveTransaction
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts

JOB = Job("notes.index", {"note_id": 1})
AUTOCOMMIT = "autocommit mode outside a transaction"
OURS = ("outbox_messages", "outbox_jobs")


def _known(conn: Any) -> None:
    """The kind remembered, as after any earlier record() in the process."""
    record(conn, "known:first", JOB)
    conn.rollback()
    assert type(conn) in adapters._by_type


def _refused_after_close(app: Any) -> None:
    app.close()
    with pytest.raises(NoActiveTransaction, match="is closed"):
        record(app, "known:closed", JOB)
    with pytest.raises(NoActiveTransaction, match="is closed"):
        push(app, JOB)


def test_a_remembered_psycopg_connection_is_still_checked_every_call(
    db_url: str, backend: str, conn: Connection
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)
    app = raw_connect(db_url)
    _known(app)
    app.autocommit = True
    with pytest.raises(NoActiveTransaction, match=AUTOCOMMIT):
        record(app, "known:autocommit", JOB)
    with pytest.raises(NoActiveTransaction, match=AUTOCOMMIT):
        push(app, JOB)
    app.autocommit = False
    with pytest.raises(psycopg.errors.DivisionByZero):
        app.execute("SELECT 1 / 0")
    with pytest.raises(NoActiveTransaction, match="transaction has failed"):
        record(app, "known:failed", JOB)
    app.rollback()
    _refused_after_close(app)
    assert counts(conn, OURS) == {"outbox_messages": 0, "outbox_jobs": 0}


def test_a_remembered_sqlite3_connection_is_still_checked_every_call(
    db_url: str, backend: str, conn: Connection
) -> None:
    skip_unless(backend, "sqlite", gap=Gap.SQLITE3_CONNECTION)
    app = raw_connect(db_url)
    _known(app)
    app.isolation_level = None  # autocommit
    with pytest.raises(NoActiveTransaction, match=AUTOCOMMIT):
        record(app, "known:autocommit", JOB)
    with pytest.raises(NoActiveTransaction, match=AUTOCOMMIT):
        push(app, JOB)
    _refused_after_close(app)
    assert counts(conn, OURS) == {"outbox_messages": 0, "outbox_jobs": 0}
