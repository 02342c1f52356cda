"""outbox.testing on every backend: run_pending on the test's own connection and
transaction, the frozen clock, retries and dead letters, periodic ticks, recorded(),
and eager mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, text

from outbox import Job, PermanentFailure, Registry, record, results
from outbox.db.connection import Connection
from outbox.errors import ConfigurationError, NoActiveTransaction
from outbox.queue import push
from outbox.queue.backoff import Backoff
from outbox.testing import ANY, Clock, assert_recorded, eager, recorded, run_pending
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.factories import count_rows


class App:
    """A small application: handlers that note what they saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, int]] = []
        self.fail_until = 0
        self.registry = Registry()
        r = self.registry

        @r.job("app.note", backoff=Backoff(base=10, cap=40))
        def note(payload: Any, ctx: Any) -> None:
            self.seen.append(("app.note", payload, ctx.attempt))
            if ctx.attempt <= self.fail_until:
                raise ConnectionError("briefly down")

        @r.job("app.poison")
        def poison(payload: Any, ctx: Any) -> None:
            raise PermanentFailure("never")

        @r.job("app.chain")
        def chain(payload: Any, ctx: Any) -> None:
            self.seen.append(("app.chain", payload, ctx.attempt))

        @r.job("app.write", transactional=True)
        def write(payload: Any, ctx: Any) -> None:
            cur = ctx.connection.cursor()
            cur.execute(f"INSERT INTO t_notes (id) VALUES ({int(payload['id'])})")
            cur.close()
            if payload.get("fail"):
                raise ValueError("rolled back with the job's savepoint")

        @r.periodic("0 * * * *", name="app.hourly", payload={"k": "hourly"})
        def hourly(payload: Any, ctx: Any) -> None:
            self.seen.append(("app.hourly", payload, ctx.attempt))


@pytest.fixture
def app() -> App:
    return App()


@pytest.fixture
def notes(conn: Connection) -> Iterator[None]:
    conn.execute_sql("CREATE TABLE t_notes (id INTEGER NOT NULL)")
    yield


def test_run_pending_relays_and_runs_inside_the_tests_transaction(
    app: App, app_conn: Any, conn: Connection
) -> None:
    message_id = record(app_conn, "k1", Job("app.note", {"n": 1}))
    report = run_pending(app_conn, app.registry)
    assert [(r.job_name, r.message_id, r.outcome) for r in report.ran] == [
        ("app.note", message_id, "done")
    ]
    assert app.seen == [("app.note", {"n": 1}, 1)]
    assert recorded(app_conn) == []  # done: deleted, as the worker deletes it
    assert count_rows(conn, "outbox_messages") == 0  # nothing committed: another session sees none
    app_conn.rollback()
    assert count_rows(conn, "outbox_messages") == count_rows(conn, "outbox_jobs") == 0


def test_a_job_that_records_another_runs_in_the_same_call(app: App, app_conn: Any) -> None:
    @app.registry.job("app.start")
    def start(payload: Any, ctx: Any) -> None:
        push(app_conn, Job("app.chain", {"from": "start"}))

    record(app_conn, "k1", Job("app.start"))
    assert run_pending(app_conn, app.registry).done == 2
    assert app.seen == [("app.chain", {"from": "start"}, 1)]


def test_the_frozen_clock_decides_when_delayed_jobs_are_due(app: App, app_conn: Any) -> None:
    """Only app.note counts here: the clock starts at the real time, and 60 s of it may
    cross an hour, when the app's hourly schedule rightly runs too."""

    def notes() -> list[Any]:
        return [p for name, p, _ in app.seen if name == "app.note"]

    clock = Clock()
    record(app_conn, "k1", Job("app.note", "later"), available_at=clock() + 60)
    push(app_conn, Job("app.note", "pushed"), delay=30)
    assert notes() == [] and run_pending(app_conn, app.registry, clock=clock).ran == []
    clock.advance(30)
    run_pending(app_conn, app.registry, clock=clock)
    assert notes() == ["pushed"]
    clock.advance(30)
    run_pending(app_conn, app.registry, clock=clock)
    assert notes() == ["pushed", "later"]


def test_retries_wait_the_backoff_then_dead_letter_at_the_limit(app: App, app_conn: Any) -> None:
    clock = Clock()
    app.fail_until = 99
    record(app_conn, "k1", Job("app.note", "flaky", max_attempts=3))
    first = run_pending(app_conn, app.registry, clock=clock)
    assert [(r.outcome, r.error) for r in first.ran] == [("retry", "ConnectionError")]
    (job,) = recorded(app_conn, "app.note")
    assert (job.where, job.state) == ("job", "retrying")
    def notes_run() -> int:  # the hourly schedule may run too if 30 s cross an hour
        report = run_pending(app_conn, app.registry, clock=clock)
        return sum(r.job_name == "app.note" for r in report.ran)

    for wait in (10, 20):  # the backoff's bound after attempts 1 and 2: 10 s, 20 s
        clock.advance(wait - 1)
        assert notes_run() == 0
        clock.advance(1)
        assert notes_run() == 1
    assert notes_run() == 0
    assert [a for name, _, a in app.seen if name == "app.note"] == [1, 2, 3]
    assert recorded(app_conn, "app.note")[0].state == "dead"
    assert_recorded(app_conn, "app.note", "flaky", count=1)
    assert recorded(app_conn, "app.note")[0].where == "dead"


def test_a_permanent_failure_dead_letters_at_once(app: App, app_conn: Any) -> None:
    push(app_conn, Job("app.poison", {"x": 1}))
    report = run_pending(app_conn, app.registry)
    assert [(r.outcome, r.error) for r in report.ran] == [
        ("dead", "outbox.errors.PermanentFailure")
    ]
    assert [r.where for r in recorded(app_conn, "app.poison")] == ["dead"]


def test_results_and_dead_letters_are_kept_as_the_worker_keeps_them(app_conn: Any) -> None:
    """A handler that keeps its result gets it written, success or failure, and a dead
    letter keeps the job's priority: run_pending settles as the worker does."""
    registry = Registry()
    registry.job("app.sum", keep_result=True)(lambda p, ctx: {"sum": p["a"] + p["b"]})

    @registry.job("app.broken", keep_result=True, max_attempts=1)
    def broken(payload: Any, ctx: Any) -> None:
        raise LookupError("secret not found")

    ok = push(app_conn, Job("app.sum", {"a": 1, "b": 2}))
    bad = push(app_conn, Job("app.broken", {}, priority=7))
    assert [r.outcome for r in run_pending(app_conn, registry).ran] == ["done", "dead"]
    cur = app_conn.cursor()  # in the test's transaction, which run_pending wrote in
    cur.execute("SELECT message_id, status, return_value, exception_class"
                " FROM outbox_job_results")  # fmt: skip
    kept = {str(m): (s, None if v is None else orjson.loads(v), c) for m, s, v, c in cur}
    assert kept == {
        ok: (results.SUCCESSFUL, {"sum": 3}, None), bad: (results.FAILED, None, "LookupError")}
    cur.execute("SELECT priority FROM outbox_failed_jobs")
    assert [int(r[0]) for r in cur.fetchall()] == [7]


def test_a_transactional_handler_writes_in_the_tests_transaction_and_a_failure_rolls_back(
    app: App, app_conn: Any, conn: Connection, notes: None
) -> None:
    push(app_conn, Job("app.write", {"id": 1}))
    push(app_conn, Job("app.write", {"id": 2, "fail": True}, max_attempts=1))
    report = run_pending(app_conn, app.registry)
    assert sorted(r.outcome for r in report.ran) == ["dead", "done"]
    cur = app_conn.cursor()
    cur.execute("SELECT id FROM t_notes")
    assert [r[0] for r in cur.fetchall()] == [1]  # the failed job's insert rolled back
    cur.close()
    app_conn.rollback()
    assert count_rows(conn, "t_notes") == 0


def test_advancing_the_clock_records_and_runs_periodic_ticks(app: App, app_conn: Any) -> None:
    clock = Clock()
    assert run_pending(app_conn, app.registry, clock=clock).ticks == 0
    clock.advance(3 * 3600)
    report = run_pending(app_conn, app.registry, clock=clock)
    assert report.ticks == 3 and report.done == 3
    assert [s for s in app.seen if s[0] == "app.hourly"] == [("app.hourly", {"k": "hourly"}, 1)] * 3
    assert run_pending(app_conn, app.registry, clock=clock).ticks == 0  # each tick once


def test_recorded_filters_by_name_payload_and_queue(app: App, app_conn: Any) -> None:
    record(app_conn, "k1", Job("app.note", {"b": 2, "a": [1, (2, 3)]}, queue="mail"))
    record(app_conn, "k2", Job("app.note", {"b": 3}))
    assert len(recorded(app_conn, "app.note")) == 2
    (found,) = recorded(app_conn, "app.note", {"a": [1, [2, 3]], "b": 2})
    assert (found.where, found.state, found.queue) == ("intent", "pending", "mail")
    assert recorded(app_conn, "app.note", ANY, queue="default")[0].payload == {"b": 3}
    assert recorded(app_conn, "app.other") == []
    assert_recorded(app_conn, "app.note", {"b": 3})
    with pytest.raises(AssertionError, match=r"expected a job\(s\) 'app.note' with payload"):
        assert_recorded(app_conn, "app.note", {"b": 4})
    with pytest.raises(AssertionError, match=r"Stored: app\.note"):
        assert_recorded(app_conn, "app.note", count=3)


def test_a_job_no_handler_knows_is_left_in_the_queue_and_reported(app: App, app_conn: Any) -> None:
    push(app_conn, Job("elsewhere.job"))
    report = run_pending(app_conn, app.registry)
    assert report.unknown == ["elsewhere.job"] and len(report) == 0
    assert recorded(app_conn, "elsewhere.job")[0].state == "queued"


def test_run_pending_needs_a_registry_and_a_transaction(app: App, db_url: str) -> None:
    with pytest.raises(ConfigurationError, match="no registry"):
        run_pending(object())
    engine = create_engine(sqlalchemy_url(db_url))
    try:
        with engine.connect() as c:
            ac = c.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(NoActiveTransaction):
                run_pending(ac, app.registry)
    finally:
        engine.dispose()


def test_eager_mode_runs_jobs_when_a_sqlalchemy_transaction_commits(
    app: App, db_url: str, conn: Connection
) -> None:
    engine = create_engine(sqlalchemy_url(db_url))
    try:
        with eager(app.registry):
            with engine.begin() as c:
                record(c, "k1", Job("app.note", {"n": 1}))
            assert app.seen == [("app.note", {"n": 1}, 1)]
        with engine.begin() as c:  # outside the block: recorded, not run
            record(c, "k2", Job("app.note", {"n": 2}))
    finally:
        engine.dispose()
    assert len(app.seen) == 1
    assert count_rows(conn, "outbox_jobs") == 0
    assert count_rows(conn, "outbox_keys") == 2  # both recorded
    rows = conn.execute_sql("SELECT state FROM outbox_messages ORDER BY id")
    assert [r[0] for r in rows] == ["pending"]  # the one run eagerly was handed off


def test_eager_mode_runs_at_a_session_commit(app: App, db_url: str, conn: Connection) -> None:
    from sqlalchemy.orm import Session

    engine = create_engine(sqlalchemy_url(db_url))
    try:
        with eager(app.registry), Session(engine) as session:
            record(session, "k1", Job("app.note", {"n": 1}))
            session.execute(text("SELECT 1"))
            session.commit()
    finally:
        engine.dispose()
    assert app.seen == [("app.note", {"n": 1}, 1)]
    assert count_rows(conn, "outbox_jobs") == 0
