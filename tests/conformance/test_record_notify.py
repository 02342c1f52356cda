"""The PostgreSQL wake-up: record() and push() NOTIFY in the caller's transaction, so a
watching relay or worker hears of the intent only when it commits, never before or after
a rollback; ``settings.notify`` turns it off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox import Job, record
from outbox.config import configure, settings
from outbox.db.dialect import dialect_named
from outbox.queue import push
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_gap

JOB = Job("notes.index", {"note_id": 1})
CHANNELS = ("outbox_relay", "outbox_jobs", "test_sentinel")


@pytest.fixture
def needs_listen(backend: str) -> None:
    """Asked first, so no database is made for a backend that will be skipped."""
    if not dialect_named(backend).supports_listen:
        skip_gap(Gap.LISTEN_NOTIFY)


@pytest.fixture
def listener(
    needs_listen: None, db_url: str, database: object
) -> Iterator[psycopg.Connection[Any]]:
    c = raw_connect(db_url)
    c.autocommit = True
    for channel in CHANNELS:
        c.execute(f"LISTEN {channel}")
    yield c
    c.close()


@pytest.fixture
def notify_setting() -> Iterator[None]:
    saved = settings.notify
    yield
    configure(notify=saved)


def heard(listener: psycopg.Connection[Any], app_conn: Any) -> list[str]:
    """Channels notified so far, in order, up to a sentinel sent after everything else
    (notifications arrive in commit order, so the sentinel closes the list)."""
    app_conn.execute("SELECT pg_notify('test_sentinel', '')")
    app_conn.commit()
    channels = []
    for note in listener.notifies(timeout=60):
        if note.channel == "test_sentinel":
            return channels
        assert note.payload == ""  # never a payload, not even an id
        channels.append(note.channel)
    raise AssertionError("the sentinel notification never arrived")


def test_record_and_push_notify_on_commit_only(
    needs_listen: None, listener: psycopg.Connection[Any], app_conn: Any, notify_setting: None
) -> None:
    configure(notify=True)
    record(app_conn, "k1", JOB)
    push(app_conn, JOB)
    app_conn.rollback()
    assert heard(listener, app_conn) == []
    record(app_conn, "k1", JOB)
    push(app_conn, JOB)
    app_conn.commit()
    assert sorted(heard(listener, app_conn)) == ["outbox_jobs", "outbox_relay"]


def test_a_replayed_key_sends_no_new_wake_up(
    needs_listen: None, listener: psycopg.Connection[Any], app_conn: Any, notify_setting: None
) -> None:
    configure(notify=True)
    record(app_conn, "k1", JOB)
    app_conn.commit()
    assert heard(listener, app_conn) == ["outbox_relay"]
    record(app_conn, "k1", JOB)
    app_conn.commit()
    assert heard(listener, app_conn) == []


def test_notify_switched_off_sends_nothing(
    needs_listen: None, listener: psycopg.Connection[Any], app_conn: Any, notify_setting: None
) -> None:
    configure(notify=False)
    record(app_conn, "k1", JOB)
    push(app_conn, JOB)
    app_conn.commit()
    assert heard(listener, app_conn) == []
