"""The worker in-process on every backend: handlers, retries, dead letters, leases."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox import Job, PermanentFailure, Registry
from outbox.db.connection import Connection, Database
from outbox.db.rows import ClaimedJob
from outbox.errors import ConfigurationError
from outbox.hooks import NoHooks
from outbox.queue import Backoff, JobContext, Worker, WorkerConfig, push
from outbox.queue.worker import UNKNOWN_JOB
from tests.fixtures import queue_ops as ops
from tests.fixtures.factories import count_rows as count
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.processes import wait_until

SECRET = "payload-secret-4711"


def _run(database: Database, registry: Registry, **kw: Any) -> Any:
    """Step the worker, round by round, until a round claims nothing."""
    with Worker(database, registry, WorkerConfig(**kw)) as worker:
        while worker.run_once():
            pass
    return worker.stats


def _push(app_conn: Any, *jobs: Job, delay: float = 0) -> list[str]:
    ids = [push(app_conn, job, delay=delay) for job in jobs]
    app_conn.commit()
    return ids


def _make_due(conn: Connection) -> None:
    conn.execute_sql("UPDATE outbox_jobs SET available_at = 0")


def test_worker_runs_sync_and_async_handlers_and_deletes_their_jobs(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    seen: list[tuple[str, Any, int, str]] = []

    @registry.job("a.sync")
    def sync_job(payload: Any, ctx: JobContext) -> None:
        seen.append(("sync", payload, ctx.attempt, ctx.message_id))

    @registry.job("a.async")
    async def async_job(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        seen.append(("async", payload, ctx.attempt, ctx.message_id))

    ids = _push(app_conn, Job("a.sync", {"n": 1}), Job("a.async", [1, 2]), Job("a.sync", None))
    stats = _run(database, registry, concurrency=4)
    by_id = {mid: (kind, payload, attempt) for kind, payload, attempt, mid in seen}
    assert by_id == {
        ids[0]: ("sync", {"n": 1}, 1),
        ids[1]: ("async", [1, 2], 1),
        ids[2]: ("sync", None, 1),
    }
    assert (stats.claimed, stats.succeeded, stats.graceful) == (3, 3, True)
    assert count(conn, "outbox_jobs") == 0


def test_context_describes_the_job(database: Database, app_conn: Any) -> None:
    registry = Registry()
    got: list[JobContext] = []

    @registry.job("a.ctx", max_attempts=7)
    def job(payload: Any, ctx: JobContext) -> None:
        got.append(ctx)

    (mid,) = _push(app_conn, Job("a.ctx", {}, queue="search"))
    _run(database, registry, queues={"search": None})
    (ctx,) = got
    assert (ctx.message_id, ctx.job_name, ctx.queue, ctx.attempt, ctx.max_attempts) == (
        mid,
        "a.ctx",
        "search",
        1,
        7,
    )
    assert ctx.enqueued_at.tzinfo is not None and ctx.connection is None
    assert ctx.log is not None


class _Heard(NoHooks):
    """Hooks that keep what they hear (a subclass of the do-nothing default)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.settled: list[tuple[str, str, str | None]] = []

    def job_started(self, job: ClaimedJob) -> None:
        self.started.append(job.message_id)

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        self.settled.append((job.message_id, action, error))


def test_hooks_hear_every_job_start_and_settle(database: Database, app_conn: Any) -> None:
    registry = Registry()

    @registry.job("h.ok")
    def ok(payload: Any, ctx: JobContext) -> None:
        pass

    @registry.job("h.bad")
    def bad(payload: Any, ctx: JobContext) -> None:
        raise PermanentFailure("no")

    good, failed = _push(app_conn, Job("h.ok", {}), Job("h.bad", {}))
    heard = _Heard()
    with Worker(database, registry, WorkerConfig(), hooks=heard) as worker:
        while worker.run_once():
            pass
    assert sorted(heard.started) == sorted([good, failed])
    assert sorted(heard.settled) == sorted(
        [(good, "ack", None), (failed, "dead", "outbox.errors.PermanentFailure")]
    )


def test_failing_job_retries_with_growing_delays_then_lands_in_dead_letters(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()

    @registry.job("a.fail", max_attempts=3, backoff=Backoff(base=20, cap=300, jitter=False))
    def job(payload: Any, ctx: JobContext) -> None:
        raise LookupError(f"broke on attempt {ctx.attempt}: {SECRET}")

    (mid,) = _push(app_conn, Job("a.fail", {"secret": SECRET}))
    with capture_logs() as logs:
        for expected_delay_ms in (20_000, 40_000):
            stats = _run(database, registry)
            assert stats.retried == 1
            attempts, available_at, error = conn.execute_sql(
                "SELECT attempts, available_at, last_error FROM outbox_jobs"
            )[0]
            ahead = available_at - ops.now_ms(conn)
            assert expected_delay_ms - 10_000 < ahead <= expected_delay_ms
            assert error == "LookupError"
            assert _run(database, registry).claimed == 0  # not due yet
            _make_due(conn)
        stats = _run(database, registry)
    assert stats.dead == 1
    assert count(conn, "outbox_jobs") == 0
    cls, message, trace, attempts = conn.execute_sql(
        "SELECT exception_class, exception_message, exception_trace, attempts "
        "FROM outbox_failed_jobs"
    )[0]
    assert (cls, attempts) == ("LookupError", 3)
    assert message == f"broke on attempt 3: {SECRET}"
    assert "Traceback" in trace and "raise LookupError" in trace
    assert SECRET not in repr(logs)
    assert [e["error"] for e in logs if e["event"] in ("job.retry", "job.dead")] == [
        "LookupError"
    ] * 3
    _ = mid


def test_permanent_failure_dead_letters_at_once(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()

    @registry.job("a.perm", max_attempts=10)
    def job(payload: Any, ctx: JobContext) -> None:
        raise PermanentFailure("never going to work")

    _push(app_conn, Job("a.perm", {}))
    assert _run(database, registry).dead == 1
    rows = conn.execute_sql("SELECT exception_class, attempts FROM outbox_failed_jobs")
    assert tuple(rows[0]) == ("outbox.errors.PermanentFailure", 1)


@dataclasses.dataclass
class NoteRef:
    note_id: int


def test_payload_that_does_not_fit_the_signature_dead_letters_at_once(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    ran: list[NoteRef] = []

    @registry.job("a.typed", max_attempts=10)
    def typed(payload: NoteRef, ctx: JobContext) -> None:
        ran.append(payload)

    # (a handler that forgot ctx is refused at registration: test_unruly_handlers.py)
    @registry.job("a.inner", max_attempts=10, backoff=Backoff(base=30, jitter=False))
    def inner(payload: Any, ctx: JobContext) -> None:
        int("not a number")  # a ValueError inside the handler is an ordinary failure

    _push(
        app_conn,
        Job("a.typed", {"note_id": 5}),
        Job("a.typed", {"wrong": 5}),
        Job("a.inner", {}),
    )
    stats = _run(database, registry)
    assert ran == [NoteRef(5)]
    assert (stats.dead, stats.retried) == (1, 1)
    dead = conn.execute_sql("SELECT job_name, exception_class FROM outbox_failed_jobs ORDER BY id")
    assert [tuple(r) for r in dead] == [("a.typed", "TypeError")]
    assert conn.execute_sql("SELECT job_name, last_error FROM outbox_jobs")[0] == (
        "a.inner",
        "ValueError",
    )


def test_transactional_handler_commits_its_writes_with_the_acknowledgement(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    conn.execute_sql("CREATE TABLE notes_index (note_id INTEGER)")
    registry = Registry()

    @registry.job("a.tx", transactional=True, backoff=Backoff(base=30, jitter=False))
    def job(payload: Any, ctx: JobContext) -> None:
        assert ctx.connection is not None
        ctx.connection.cursor().execute(
            f"INSERT INTO notes_index (note_id) VALUES ({int(payload['note_id'])})"
        )
        if payload.get("fail"):
            raise RuntimeError("after the write")

    _push(app_conn, Job("a.tx", {"note_id": 1}), Job("a.tx", {"note_id": 2, "fail": True}))
    stats = _run(database, registry)
    assert (stats.succeeded, stats.retried) == (1, 1)
    assert [tuple(r) for r in conn.execute_sql("SELECT note_id FROM notes_index")] == [(1,)]
    left = conn.execute_sql("SELECT job_name, attempts, reserved_by, last_error FROM outbox_jobs")
    assert [tuple(r) for r in left] == [("a.tx", 1, None, "RuntimeError")]


def test_transactional_handlers_must_be_sync() -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError, match="must be sync"):

        @registry.job("a.async_tx", transactional=True)
        async def job(payload: Any, ctx: JobContext) -> None:
            pass

    assert "a.async_tx" not in registry


def test_job_without_handler_is_released_not_lost(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    (mid,) = _push(app_conn, Job("a.future_job", {}))
    with capture_logs() as logs:
        stats = _run(database, Registry())
    assert stats.unknown == 1
    (stopped,) = [e for e in logs if e["event"] == "worker.stopped"]
    assert stopped["released"] == 1  # handed back unspent (issue 38: it said 0)
    attempts, holder, available_at, error = conn.execute_sql(
        "SELECT attempts, reserved_by, available_at, last_error FROM outbox_jobs"
    )[0]
    assert (attempts, holder, error) == (0, None, UNKNOWN_JOB)
    assert available_at > ops.now_ms(conn)
    assert [e["log_level"] for e in logs if e["event"] == "job.unknown_name"] == ["error"]
    assert count(conn, "outbox_failed_jobs") == 0
    _ = mid


def test_stop_when_empty_leaves_delayed_jobs_waiting(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    ran: list[Any] = []
    registry.job("a.later")(lambda payload, ctx: ran.append(payload))
    _push(app_conn, Job("a.later", 1))
    _push(app_conn, Job("a.later", 2), delay=120)
    stats = _run(database, registry)
    assert ran == [1] and stats.claimed == 1
    assert count(conn, "outbox_jobs", "reserved_by IS NULL") == 1


def test_max_jobs_stops_after_that_many(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    registry.job("a.n")(lambda payload, ctx: None)
    _push(app_conn, *[Job("a.n", i) for i in range(5)])
    stats = Worker(database, registry, WorkerConfig(max_jobs=2, prefetch=10)).run()
    assert (stats.claimed, stats.succeeded) == (2, 2)
    assert count(conn, "outbox_jobs", "reserved_by IS NULL AND attempts = 0") == 3


def test_lease_of_a_long_job_is_renewed_while_it_runs(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    leases: list[int] = []
    done = threading.Event()

    @registry.job("a.long")
    def job(payload: Any, ctx: JobContext) -> None:
        with database.connect() as c:
            for _ in range(6):
                leases.append(int(c.execute_sql("SELECT lease_expires_at FROM outbox_jobs")[0][0]))
                time.sleep(0.4)
        done.set()

    _push(app_conn, Job("a.long", {}))
    stats = _run(database, registry, lease=0.6)
    assert done.is_set()
    assert (stats.succeeded, stats.reaped, stats.lost) == (1, 0, 0)
    assert len(set(leases)) > 1 and leases == sorted(leases)


def test_async_handler_past_its_timeout_is_cancelled_and_retried(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    finished: list[int] = []

    @registry.job("a.slow_async", timeout=0.2, backoff=Backoff(base=30, jitter=False))
    async def job(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(30)
        finished.append(1)

    _push(app_conn, Job("a.slow_async", {}))
    stats = _run(database, registry)
    assert stats.retried == 1 and finished == []
    assert conn.execute_sql("SELECT last_error FROM outbox_jobs")[0][0] == (
        "outbox.queue.execute.JobTimeout"
    )


def test_sync_handler_past_its_timeout_is_recorded_as_timed_out(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    release = threading.Event()

    @registry.job("a.slow_sync", timeout=0.2, max_attempts=1)
    def job(payload: Any, ctx: JobContext) -> None:
        release.wait(30)

    _push(app_conn, Job("a.slow_sync", {}))
    try:
        stats = _run(database, registry, grace=0)
    finally:
        release.set()
    assert (stats.timed_out, stats.dead) == (1, 1)
    assert conn.execute_sql("SELECT exception_class FROM outbox_failed_jobs")[0][0] == (
        "outbox.queue.execute.JobTimeout"
    )


def test_per_queue_caps_and_several_queues_in_one_worker(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    seen: list[str] = []
    registry.job("a.q")(lambda payload, ctx: seen.append(ctx.queue))
    _push(app_conn, *[Job("a.q", i, queue="search") for i in range(6)])
    _push(app_conn, *[Job("a.q", i, queue="mail") for i in range(3)])
    _push(app_conn, Job("a.q", 0, queue="other"))
    stats = _run(database, registry, queues={"search": 3, "mail": 1})
    assert sorted(seen) == ["mail"] * 3 + ["search"] * 6
    assert stats.succeeded == 9
    assert count(conn, "outbox_jobs") == 1


def test_stop_releases_unstarted_jobs_without_spending_an_attempt(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    started = threading.Event()
    release = threading.Event()

    @registry.job("a.block")
    def job(payload: Any, ctx: JobContext) -> None:
        started.set()
        release.wait(30)

    _push(app_conn, *[Job("a.block", i) for i in range(5)])
    worker = Worker(database, registry, WorkerConfig(prefetch=10, concurrency=1))
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(30)
    worker.stop()
    with database.connect() as c:
        deadline = time.monotonic() + 30
        while count(c, "outbox_jobs", "reserved_by IS NULL") < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    release.set()
    thread.join(30)
    assert worker.stats.graceful and worker.stats.succeeded == 1 and worker.stats.released == 4
    assert count(conn, "outbox_jobs", "reserved_by IS NULL AND attempts = 0") == 4
    assert count(conn, "outbox_jobs") == 4


@contextlib.contextmanager
def _idle_worker(database: Database) -> Iterator[tuple[Worker, threading.Event]]:
    """A worker that has polled, found nothing, and will not poll again for 300 s (and,
    on PostgreSQL, LISTENs); yields it with the event its ``a.wake`` handler sets."""
    registry = Registry()
    ran = threading.Event()
    registry.job("a.wake")(lambda payload, ctx: ran.set())
    worker = Worker(database, registry, WorkerConfig(sleep=300, lease=600))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert worker.idle.wait(30)
        if database.dialect.supports_listen:
            assert worker.listener is not None and worker.listener.ready.wait(30)
        yield worker, ran
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_idle_worker_wakes_for_a_new_job_before_its_next_poll(
    database: Database, app_conn: Any
) -> None:
    """PostgreSQL: push's NOTIFY wakes the LISTENing worker. Elsewhere ``wake()`` does."""
    with _idle_worker(database) as (worker, ran):
        _push(app_conn, Job("a.wake", {}))
        if not database.dialect.supports_listen:
            worker.wake()
        assert ran.wait(60), "the job waited for the 300 s poll"
    assert worker.stats.succeeded == 1


def _listen_sessions(conn: Connection) -> list[int]:
    rows = conn.execute_sql(
        "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN outbox_jobs'"
        " AND datname = current_database() AND pid <> pg_backend_pid()"
    )
    return [int(r[0]) for r in rows]


def test_worker_listener_survives_losing_its_connection_and_closes_with_the_worker(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    """A job pushed while the LISTEN connection is down still wakes the worker: the
    listener wakes it once it listens again, since that job's NOTIFY reached nobody."""
    if not database.dialect.supports_listen:
        skip_gap(Gap.LISTEN_NOTIFY)
    with _idle_worker(database) as (worker, ran):
        first = _listen_sessions(conn)
        assert len(first) == 1
        conn.execute_sql("SELECT pg_terminate_backend(%(pid)s)", {"pid": first[0]})
        _push(app_conn, Job("a.wake", {}))  # the listener waits 1 s before it reconnects
        assert ran.wait(60), "the job waited for the 300 s poll"
        again = _listen_sessions(conn)
        assert len(again) == 1 and again != first
    assert worker.stats.succeeded == 1
    deadline = time.monotonic() + 10  # the server notices the closed socket a moment later
    while _listen_sessions(conn) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _listen_sessions(conn) == []  # close() ended the listener and its connection


def test_jobs_prefetched_behind_a_slow_one_go_back_for_another_worker(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    """Adaptive prefetch (the default): a worker whose only slot is stuck in a slow job
    hands the quick jobs it claimed behind it back, attempt refunded, and a second
    worker runs them while the slow one is still running."""
    release = threading.Event()
    started = threading.Event()
    ran: list[tuple[str, int]] = []
    registry = Registry()

    @registry.job("a.slow")
    def slow(payload: Any, ctx: JobContext) -> None:
        started.set()
        assert release.wait(60)

    @registry.job("a.quick")
    def quick(payload: Any, ctx: JobContext) -> None:
        ran.append((ctx.message_id, ctx.attempt))

    _push(app_conn, Job("a.slow", {}))
    quick_ids = _push(app_conn, *[Job("a.quick", {"i": i}) for i in range(6)])
    stuck = Worker(database, registry, WorkerConfig(listen=False, sleep=0.05))
    thread = threading.Thread(target=stuck.run)
    thread.start()
    try:
        assert started.wait(30)
        with Worker(database, registry, WorkerConfig(listen=False)) as other:
            wait_until(lambda: other.run_once() == 0 and len(ran) == len(quick_ids), 60)
        assert not release.is_set()  # all of it while the slow job still ran
        assert sorted(ran) == sorted((mid, 1) for mid in quick_ids)  # no attempt spent
    finally:
        release.set()
        stuck.stop()
        thread.join(30)
    assert stuck.stats.released >= 1 and stuck.stats.succeeded == 1
    assert count(conn, "outbox_jobs") == 0
