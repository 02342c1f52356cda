"""push_many(): up to 1,000 keyless jobs straight into the queue, one statement, in the
caller's transaction, with push()'s meaning per job."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

import outbox
from outbox import Job
from outbox.config import configure, settings
from outbox.db.connection import Connection
from outbox.errors import InvalidJob, NoActiveTransaction
from outbox.queue import push, push_many, push_many_async
from outbox.queue.push import MAX_BATCH
from tests.fixtures.databases import raw_connect, sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_gap, skip_unless
from tests.fixtures.records import counts, create_notes, db_now_ms, insert_note

COLUMNS = (
    "message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,"
    " priority, reserved_by"
)


def job(i: int) -> Job:
    return Job("mail.send", {"n": i, "to": f"user:{i}"}, queue="mail", max_attempts=4)


@pytest.fixture(autouse=True)
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


def job_rows(conn: Connection) -> list[dict[str, Any]]:
    names = [c.strip() for c in COLUMNS.split(",")]
    rows = conn.execute_sql(f"SELECT {COLUMNS} FROM outbox_jobs ORDER BY id")
    return [dict(zip(names, r, strict=True)) for r in rows]


def test_it_is_exported_where_push_is() -> None:
    assert outbox.push_many is push_many and outbox.push_many_async is push_many_async


def test_jobs_commit_with_the_business_write_in_the_given_order(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    ids = push_many(app_conn, [job(i) for i in range(3)])
    assert counts(notes)["outbox_jobs"] == 0  # not before the caller commits
    app_conn.commit()
    rows = job_rows(notes)
    assert [r["message_id"] for r in rows] == ids
    assert all(uuid.UUID(i).version == 7 for i in ids) and len(set(ids)) == 3
    assert [(r["queue"], r["job_name"], r["payload"]) for r in rows] == [
        ("mail", "mail.send", f'{{"n":{i},"to":"user:{i}"}}') for i in range(3)
    ]
    assert {(r["attempts"], r["max_attempts"], r["priority"], r["reserved_by"]) for r in rows} == {
        (0, 4, 0, None)
    }
    assert counts(notes)["notes"] == 1 and counts(notes)["outbox_messages"] == 0


def test_each_row_is_what_push_writes_for_the_same_job(app_conn: Any, notes: Connection) -> None:
    odd = Job("a.b", {"z": [1, "é", None], "a": {"q": '"quoted" \\ back'}}, queue="q", priority=7)
    push(app_conn, odd, 0)
    push_many(app_conn, [odd, Job("a.b", None, queue="q")])
    app_conn.commit()
    one, many, bare = job_rows(notes)
    same = ("queue", "job_name", "payload", "attempts", "max_attempts", "priority")
    assert {k: one[k] for k in same} == {k: many[k] for k in same}
    assert (bare["payload"], bare["max_attempts"], bare["priority"]) == ("null", None, 0)


def test_delay_and_priority_apply_to_every_job_by_the_database_clock(
    app_conn: Any, notes: Connection
) -> None:
    before = db_now_ms(notes)
    push_many(app_conn, [job(i) for i in range(4)], 90, priority=3)
    app_conn.commit()
    after = db_now_ms(notes)
    rows = job_rows(notes)
    assert len({r["created_at"] for r in rows}) == 1  # one clock reading per statement
    for r in rows:
        assert before <= r["created_at"] <= after
        assert r["available_at"] - r["created_at"] == 90_000
        assert r["priority"] == 3


def test_a_thousand_jobs_go_in_one_call(app_conn: Any, notes: Connection) -> None:
    ids = push_many(app_conn, (job(i) for i in range(MAX_BATCH)))
    app_conn.commit()
    assert [r["message_id"] for r in job_rows(notes)] == ids and len(ids) == MAX_BATCH


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (Job("mail send"), "job name must be"),
        (Job("a", queue="q/1"), "queue name must be"),
        (Job("a", {"x": float("nan")}), "NaN or Infinity"),
        (Job("a", max_attempts=0), "max_attempts must be between"),
        ("not a job", "expected an outbox.Job"),
    ],
)
def test_a_bad_job_is_named_by_index_and_nothing_is_written(
    app_conn: Any, notes: Connection, backend: str, bad: Any, text: str
) -> None:
    insert_note(app_conn, backend, 1)
    batch: list[Any] = [job(i) for i in range(9)]
    batch[6] = bad
    with pytest.raises(InvalidJob, match=rf"^item 6: .*{text}"):
        push_many(app_conn, batch)
    app_conn.commit()  # the caller's transaction is intact; no job was sent
    assert counts(notes)["outbox_jobs"] == 0 and counts(notes)["notes"] == 1


def test_a_bad_delay_or_priority_or_too_many_jobs_write_nothing(
    app_conn: Any, notes: Connection
) -> None:
    with pytest.raises(InvalidJob, match=r"^delay must be between"):
        push_many(app_conn, [job(1)], -1)
    with pytest.raises(InvalidJob, match=r"^priority must be"):
        push_many(app_conn, [job(1)], priority=10)
    with pytest.raises(InvalidJob, match="at most 1,000 jobs"):
        push_many(app_conn, iter([job(i) for i in range(MAX_BATCH + 1)]))
    app_conn.commit()
    assert counts(notes)["outbox_jobs"] == 0


def test_an_empty_batch_returns_nothing_and_sends_nothing(db_url: str) -> None:
    closed = raw_connect(db_url)
    closed.close()  # a closed connection would raise if anything were sent
    assert push_many(closed, []) == []
    assert asyncio.run(push_many_async(closed, iter([]))) == []


def test_rollback_removes_the_business_write_and_every_job(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    push_many(app_conn, [job(i) for i in range(10)])
    app_conn.rollback()
    assert counts(notes)["outbox_jobs"] == counts(notes)["notes"] == 0


def test_an_autocommit_connection_is_refused_and_nothing_written(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    if backend == "sqlite":
        app_conn.isolation_level = None
    elif backend == "postgresql":
        app_conn.autocommit = True
    else:
        app_conn.autocommit(True)
    with pytest.raises(NoActiveTransaction, match="autocommit"):
        push_many(app_conn, [job(1)])
    assert counts(notes)["outbox_jobs"] == 0


def test_a_sqlalchemy_connection_and_session_join_their_transaction(
    db_url: str, notes: Connection
) -> None:
    from sqlalchemy.orm import Session

    engine = sa.create_engine(sqlalchemy_url(db_url))
    try:
        with engine.connect() as c:
            push_many(c, [job(1), job(2)])
            c.rollback()
            assert counts(notes)["outbox_jobs"] == 0
            ids = push_many(c, [job(1), job(2)])
            c.commit()
        with Session(engine) as s:
            ids += push_many(s, [job(3)])
            s.commit()
    finally:
        engine.dispose()
    assert [r["message_id"] for r in job_rows(notes)] == ids


def test_the_async_twin_on_a_sqlalchemy_async_connection(
    backend: str, db_url: str, notes: Connection
) -> None:
    if backend == "mysql":
        skip_gap(Gap.NO_ASYNC_MYSQL_DRIVER)
    engine = create_async_engine(sqlalchemy_url(db_url, is_async=True))

    async def body() -> list[str]:
        try:
            async with engine.connect() as c:
                await push_many_async(c, [job(1)])
                await c.rollback()
                ids = await push_many_async(c, [job(1), job(2)])
                await c.commit()
                return ids
        finally:
            await engine.dispose()

    ids = asyncio.run(body())
    assert [r["message_id"] for r in job_rows(notes)] == ids


def test_the_async_twin_joins_a_psycopg_async_transaction(
    backend: str, db_url: str, notes: Connection
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)
    import psycopg

    async def body() -> list[str]:
        u = make_url(db_url)
        kwargs: dict[str, Any] = {k: str(v) for k, v in u.query.items()}
        c = await psycopg.AsyncConnection.connect(
            host=u.host, port=u.port, user=u.username, dbname=u.database, **kwargs
        )
        try:
            ids = await push_many_async(c, [job(1), job(2)], priority=2)
            await c.commit()
            await c.set_autocommit(True)
            with pytest.raises(NoActiveTransaction, match="autocommit"):
                await push_many_async(c, [job(3)])
            return ids
        finally:
            await c.close()

    ids = asyncio.run(body())
    assert [(r["message_id"], r["priority"]) for r in job_rows(notes)] == [(i, 2) for i in ids]


@pytest.fixture
def notify_on() -> Iterator[None]:
    saved = settings.notify
    yield
    configure(notify=saved)


def test_postgresql_wakes_workers_on_commit_only_and_only_when_notify_is_on(
    app_conn: Any, backend: str, db_url: str, notify_on: None
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.LISTEN_NOTIFY)
    configure(notify=True)
    listener = raw_connect(db_url)
    listener.autocommit = True
    listener.execute("LISTEN outbox_jobs")
    listener.execute("LISTEN test_sentinel")

    def heard() -> list[str]:
        listener.execute("SELECT pg_notify('test_sentinel', '')")
        out: list[str] = []
        for note in listener.notifies(timeout=60):
            if note.channel == "test_sentinel":
                return out
            out.append(note.channel)
        return out

    try:
        push_many(app_conn, [job(i) for i in range(3)])
        app_conn.rollback()
        assert heard() == []
        push_many(app_conn, [job(i) for i in range(3)])
        app_conn.commit()
        assert heard() == ["outbox_jobs"]
        configure(notify=False)
        push_many(app_conn, [job(i) for i in range(3)])
        app_conn.commit()
        assert heard() == []
    finally:
        listener.close()
