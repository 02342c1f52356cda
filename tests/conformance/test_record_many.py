"""record_many() on every backend: one insert per batch, with record()'s meaning per item.

``app_conn`` is the application's connection (its transaction holds the batch); ``conn``
is our own and sees only committed rows.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from outbox import Job, record, record_many, record_many_async
from outbox.config import configure, settings
from outbox.db.connection import Connection
from outbox.errors import (
    IdempotencyConflict,
    InvalidJob,
    InvalidKey,
    NoActiveTransaction,
    RetryTransaction,
)
from outbox.job import key_digest
from outbox.record import MAX_BATCH
from tests.fixtures.databases import backend_of, raw_connect, sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import FINGERPRINT_SQL, counts, create_notes, insert_note, message_rows


def job(i: int) -> Job:
    return Job("notes.index", {"note_id": i}, queue="search")


def items(n: int, start: int = 0) -> list[tuple[str, Job]]:
    return [(f"note:{i}", job(i)) for i in range(start, start + n)]


@pytest.fixture(autouse=True)
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


def stored(conn: Connection) -> list[tuple[str, str]]:
    """(key digest, message id) of every committed intent, in insertion order."""
    return [(r["key_digest"], r["message_id"]) for r in message_rows(conn)]


def test_three_items_commit_with_the_business_write_in_the_given_order(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    ids = record_many(app_conn, items(3))
    assert counts(notes)["outbox_messages"] == 0
    app_conn.commit()
    assert len(set(ids)) == 3
    assert stored(notes) == [(key_digest(f"note:{i}"), ids[i]) for i in range(3)]
    assert counts(notes)["notes"] == 1
    assert all(r["state"] == "pending" and r["queue"] == "search" for r in message_rows(notes))
    # The stored fingerprint is the one record() computes from the row.
    assert all(a == b for a, b in notes.execute_sql(FINGERPRINT_SQL[backend]))


def test_limits_and_availability_are_stored_as_record_stores_them(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    at = datetime(2030, 1, 2, tzinfo=UTC)
    batch = [("a", Job("notes.index", {"é": "ü"}, queue="q", max_attempts=7)), ("b", job(2))]
    ids = record_many(app_conn, batch, available_at=at)
    app_conn.commit()
    rows = message_rows(notes)
    assert [(r["max_attempts"], r["available_at"]) for r in rows] == [
        (7, 1_893_542_400_000),
        (None, 1_893_542_400_000),
    ]
    assert rows[0]["payload"] == '{"é":"ü"}'
    assert all(a == b for a, b in notes.execute_sql(FINGERPRINT_SQL[backend]))
    assert [record(app_conn, k, j, available_at=at) for k, j in batch] == ids


def test_a_thousand_items_go_in_one_call_and_come_back_in_order(
    app_conn: Any, notes: Connection
) -> None:
    ids = record_many(app_conn, items(MAX_BATCH))
    app_conn.commit()
    assert stored(notes) == [(key_digest(f"note:{i}"), ids[i]) for i in range(MAX_BATCH)]


def test_replaying_the_whole_batch_returns_the_same_ids(app_conn: Any, notes: Connection) -> None:
    first = record_many(app_conn, items(5), available_at=0)
    app_conn.commit()
    again = record_many(app_conn, items(5), available_at=0)
    app_conn.commit()
    assert again == first
    assert counts(notes)["outbox_messages"] == 5


def test_a_batch_mixing_new_and_existing_keys_reuses_the_existing_ids(
    app_conn: Any, notes: Connection
) -> None:
    old = [record(app_conn, "note:1", job(1)), record(app_conn, "note:3", job(3))]
    app_conn.commit()
    ids = record_many(app_conn, items(5))
    app_conn.commit()
    assert (ids[1], ids[3]) == (old[0], old[1])
    assert len(set(ids)) == 5
    assert sorted(stored(notes)) == sorted((key_digest(f"note:{i}"), ids[i]) for i in range(5))


def test_an_existing_key_with_another_job_is_a_conflict(app_conn: Any, notes: Connection) -> None:
    old = record(app_conn, "note:2", job(99))
    app_conn.commit()
    with pytest.raises(IdempotencyConflict) as info:
        record_many(app_conn, items(4))
    assert info.value.message_id == old
    app_conn.rollback()
    assert stored(notes) == [(key_digest("note:2"), old)]


def test_a_key_repeated_with_the_same_job_gets_one_id(app_conn: Any, notes: Connection) -> None:
    ids = record_many(app_conn, [("a", job(1)), ("b", job(2)), ("a", job(1))])
    app_conn.commit()
    assert ids[0] == ids[2] != ids[1]
    assert counts(notes)["outbox_messages"] == 2


def test_a_key_repeated_with_another_job_is_a_conflict(app_conn: Any, notes: Connection) -> None:
    with pytest.raises(IdempotencyConflict):
        record_many(app_conn, [("a", job(1)), ("b", job(2)), ("a", job(3))])
    app_conn.rollback()
    assert counts(notes)["outbox_messages"] == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (("schedule:x", job(5)), InvalidKey),
        (("", job(5)), InvalidKey),
        (("k5", Job("bad name!", {})), InvalidJob),
        (("k5", Job("notes.index", {"x": float("nan")})), InvalidJob),
        ("not a pair", InvalidJob),
    ],
)
def test_a_bad_item_is_named_by_index_and_nothing_is_written(
    app_conn: Any, notes: Connection, backend: str, bad: Any, error: type[Exception]
) -> None:
    insert_note(app_conn, backend, 1)
    batch: list[Any] = items(9)
    batch[5] = bad
    with pytest.raises(error, match=r"^item 5: "):
        record_many(app_conn, batch)
    app_conn.commit()  # the business write commits; no intent was sent
    assert counts(notes)["outbox_messages"] == 0
    assert counts(notes)["notes"] == 1


def test_more_than_the_limit_is_refused_before_anything_is_sent(
    app_conn: Any, notes: Connection
) -> None:
    with pytest.raises(InvalidJob, match="at most 1,000 items"):
        record_many(app_conn, iter(items(MAX_BATCH + 1)))
    app_conn.commit()
    assert counts(notes)["outbox_messages"] == 0


def test_an_empty_batch_returns_nothing_and_sends_nothing(db_url: str, notes: Connection) -> None:
    closed = raw_connect(db_url)
    closed.close()  # a closed connection would raise if anything were sent
    assert record_many(closed, []) == []
    assert record_many(closed, iter([])) == []


def test_rollback_removes_the_business_write_and_every_intent(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    record_many(app_conn, items(10))
    app_conn.rollback()
    assert counts(notes)["outbox_messages"] == counts(notes)["notes"] == 0


def _autocommit(app_conn: Any, backend: str) -> None:
    if backend == "sqlite":
        app_conn.isolation_level = None
    elif backend == "postgresql":
        app_conn.autocommit = True
    else:
        app_conn.autocommit(True)


def test_an_autocommit_connection_is_refused_and_nothing_written(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    _autocommit(app_conn, backend)
    with pytest.raises(NoActiveTransaction, match="autocommit"):
        record_many(app_conn, items(3))
    assert counts(notes)["outbox_messages"] == 0


def test_a_sqlalchemy_connection_records_a_batch(db_url: str, notes: Connection) -> None:
    engine = sa.create_engine(sqlalchemy_url(db_url))
    try:
        with engine.begin() as c:
            ids = record_many(c, items(3))
            assert record_many(c, items(3)) == ids
    finally:
        engine.dispose()
    assert stored(notes) == [(key_digest(f"note:{i}"), ids[i]) for i in range(3)]


def test_the_async_twin_joins_a_psycopg_async_transaction(
    backend: str, db_url: str, notes: Connection
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)
    import psycopg

    u = make_url(db_url)
    kwargs: dict[str, Any] = {k: str(v) for k, v in u.query.items()}

    async def body() -> list[str]:
        c = await psycopg.AsyncConnection.connect(
            host=u.host, port=u.port, user=u.username, dbname=u.database, **kwargs
        )
        try:
            await record_many_async(c, items(4))
            await c.rollback()
            assert counts(notes)["outbox_messages"] == 0
            ids = await record_many_async(c, items(4))
            assert await record_many_async(c, items(4)) == ids
            await c.commit()
            await c.set_autocommit(True)
            with pytest.raises(NoActiveTransaction, match="autocommit"):
                await record_many_async(c, items(1, start=10))
            return ids
        finally:
            await c.close()

    ids = asyncio.run(body())
    assert stored(notes) == [(key_digest(f"note:{i}"), ids[i]) for i in range(4)]


@pytest.fixture
def notify_on() -> Iterator[None]:
    saved = settings.notify
    yield
    configure(notify=saved)


def _heard(db_url: str, body: Any) -> list[str]:
    """Channels a listener hears while ``body`` runs and commits or rolls back."""
    listener = raw_connect(db_url)
    listener.autocommit = True
    listener.execute("LISTEN outbox_relay")
    listener.execute("LISTEN test_sentinel")
    try:
        body()
        listener.execute("SELECT pg_notify('test_sentinel', '')")
        out: list[str] = []
        for note in listener.notifies(timeout=60):
            if note.channel == "test_sentinel":
                return out
            out.append(note.channel)
        return out
    finally:
        listener.close()


def test_postgresql_wakes_the_relay_on_commit_only_and_only_when_notify_is_on(
    app_conn: Any, backend: str, db_url: str, notify_on: None
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.LISTEN_NOTIFY)
    configure(notify=True)

    def rolled_back() -> None:
        record_many(app_conn, items(3))
        app_conn.rollback()

    def committed() -> None:
        record_many(app_conn, items(3))
        app_conn.commit()

    assert _heard(db_url, rolled_back) == []
    assert _heard(db_url, committed) == ["outbox_relay"]
    configure(notify=False)
    assert _heard(db_url, lambda: (record_many(app_conn, items(3, 5)), app_conn.commit())) == []


def racing_batch(db_url: str, reverse: bool, barrier: Any, out: Any) -> None:
    """One producer process: the same 50 keys as its rival (maybe in reverse order), at
    the same instant; a ``RetryTransaction`` is handled as documented: roll back, rerun."""
    conn = raw_connect(db_url)
    batch = items(50)[::-1] if reverse else items(50)
    try:
        for attempt in range(10):
            if backend_of(db_url) == "mysql":
                conn.begin()
            if attempt == 0:
                barrier.wait(timeout=60)
            try:
                ids = record_many(conn, batch)
                conn.commit()
                out.put(("ok", dict(zip([k for k, _ in batch], ids, strict=True))))
                return
            except RetryTransaction:
                conn.rollback()
        out.put(("gave up", {}))
    except Exception as exc:
        out.put((type(exc).__name__, {}))
    finally:
        conn.close()


def test_two_processes_racing_on_the_same_keys_agree_on_one_id_per_key(
    db_url: str, notes: Connection
) -> None:
    spawn = multiprocessing.get_context("spawn")
    barrier, out = spawn.Barrier(2), spawn.Queue()
    procs = [
        spawn.Process(target=racing_batch, args=(db_url, reverse, barrier, out))
        for reverse in (False, True)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert [r[0] for r in results] == ["ok", "ok"]
    assert results[0][1] == results[1][1]
    assert sorted(stored(notes)) == sorted((key_digest(k), i) for k, i in results[0][1].items())
    assert counts(notes)["outbox_messages"] == 50
