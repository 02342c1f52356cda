"""Global limits on every backend, at the driver seam: admit within concurrency and rate,
hand the rest back unspent, free and renew slots, wake a waiting job."""

from __future__ import annotations

import threading
import time
from typing import Any

from outbox import Job, Registry
from outbox.db.connection import Connection, Database
from outbox.db.rows import ClaimedJob, LimitAdmit, LimitAsk, LimitScope, LimitSlot
from outbox.queue import JobContext, Worker, WorkerConfig, limits, push
from outbox.queue.gate import KEY_ERROR
from tests.fixtures import queue_ops as ops
from tests.fixtures.factories import Rows
from tests.fixtures.workers import count, seed_jobs

W1 = "host:1:aaaa"
W2 = "host:2:bbbb"
LEASE_MS = 30_000
KEY = "k" * 64


def _claim(conn: Connection, n: int, worker: str = W1) -> list[ClaimedJob]:
    return ops.claim(conn, "default", n, worker, LEASE_MS)


def _admit(
    conn: Connection,
    jobs: list[ClaimedJob],
    scope: LimitScope,
    *,
    room: int = 100,
    holder: str = W1,
) -> list[Any]:
    asks = [LimitAsk(j, (scope,)) for j in jobs]
    return conn.driver.limit_admit(LimitAdmit(holder, LEASE_MS, room, asks))


def _row(conn: Connection, job_id: int) -> tuple[Any, ...]:
    rows = conn.execute_sql(
        f"SELECT attempts, reserved_by, available_at FROM outbox_jobs WHERE id = {job_id}"
    )
    return tuple(rows[0])


def test_concurrency_admits_up_to_the_limit_and_defers_the_rest_unspent(
    conn: Connection,
) -> None:
    seed_jobs(conn, 3)
    jobs = _claim(conn, 3)
    before = ops.now_ms(conn)
    verdicts = _admit(conn, jobs, LimitScope(KEY, concurrency=2))
    assert [v.admitted for v in verdicts] == [True, True, False]
    third = verdicts[2]
    assert 0 < third.wait_ms <= LEASE_MS
    attempts, holder, available_at = _row(conn, jobs[2].id)
    assert (attempts, holder) == (0, None)
    assert available_at >= before + LEASE_MS - 1_000
    assert count(conn, "outbox_limit_slots") == 2
    assert count(conn, "outbox_limit_waits", f"job_id = {jobs[2].id}") == 1


def test_a_freed_slot_wakes_the_waiting_job_and_lets_it_in(conn: Connection) -> None:
    seed_jobs(conn, 2)
    first, second = _claim(conn, 2)
    scope = LimitScope(KEY, concurrency=1)
    assert [v.admitted for v in _admit(conn, [first, second], scope)] == [True, False]
    assert conn.driver.limit_release(W1, [LimitSlot(KEY, first)]) == 1
    assert _row(conn, second.id)[2] <= ops.now_ms(conn)  # due now, not at the lease's end
    assert count(conn, "outbox_limit_waits") == 0
    (again,) = _claim(conn, 1, W2)
    assert again.id == second.id and again.attempts == 1  # no attempt was spent waiting
    assert [v.admitted for v in _admit(conn, [again], scope, holder=W2)] == [True]


def test_a_slot_whose_lease_expired_is_free_again(conn: Connection) -> None:
    seed_jobs(conn, 2)
    first, second = _claim(conn, 2)
    scope = LimitScope(KEY, concurrency=1)
    assert [v.admitted for v in _admit(conn, [first], scope)] == [True]
    conn.execute_sql("UPDATE outbox_limit_slots SET expires_at = expires_at - 3600000")
    assert [v.admitted for v in _admit(conn, [second], scope)] == [True]
    assert count(conn, "outbox_limit_slots") == 1


def test_heartbeat_renews_a_held_slot_only_for_its_holder(conn: Connection) -> None:
    seed_jobs(conn, 1)
    (job,) = _claim(conn, 1)
    _admit(conn, [job], LimitScope(KEY, concurrency=1))
    slot = LimitSlot(KEY, job)
    assert conn.driver.limit_heartbeat(W2, [slot], LEASE_MS) == 0
    assert conn.driver.limit_heartbeat(W1, [slot], LEASE_MS * 2) == 1
    (expires,) = conn.execute_sql("SELECT expires_at FROM outbox_limit_slots")[0]
    assert expires > ops.now_ms(conn) + LEASE_MS


def test_rate_admits_n_per_window_and_defers_to_when_the_window_frees(
    conn: Connection,
) -> None:
    seed_jobs(conn, 5)
    jobs = _claim(conn, 5)
    verdicts = _admit(conn, jobs, LimitScope(KEY, rate=3, window_ms=60_000))
    assert [v.admitted for v in verdicts] == [True, True, True, False, False]
    assert all(59_000 < v.wait_ms <= 60_000 for v in verdicts[3:])
    assert count(conn, "outbox_limit_starts", "job_id IS NULL") == 3
    reserved = conn.execute_sql(
        "SELECT job_id FROM outbox_limit_starts WHERE job_id IS NOT NULL ORDER BY job_id"
    )
    assert [r[0] for r in reserved] == [jobs[3].id, jobs[4].id]  # each its own start
    assert count(conn, "outbox_limit_waits") == 0  # a rate wait ends by the clock alone
    assert [_row(conn, j.id)[:2] for j in jobs[3:]] == [(0, None), (0, None)]


def test_a_deferred_job_keeps_its_ticket_until_its_time_then_starts_when_there_is_room(
    conn: Connection,
) -> None:
    seed_jobs(conn, 3)
    first, second, third = _claim(conn, 3)
    scope = LimitScope(KEY, rate=1, window_ms=60_000)
    verdicts = _admit(conn, [first, second, third], scope)
    assert [v.admitted for v in verdicts] == [True, False, False]
    assert verdicts[2].wait_ms - verdicts[1].wait_ms == 60_000  # one by one, a window apart
    # 61 s later: the first start has left the window, the second's ticket is due, the
    # third's is still a minute ahead.
    conn.execute_sql("UPDATE outbox_limit_starts SET started_at = started_at - 61000")
    conn.execute_sql("UPDATE outbox_jobs SET available_at = 0")
    again = _claim(conn, 2)
    verdicts = _admit(conn, again, scope)
    assert [(v.job.id, v.admitted) for v in verdicts] == [(second.id, True), (third.id, False)]
    assert count(conn, "outbox_limit_starts", f"job_id = {second.id}") == 0  # ticket spent
    assert count(conn, "outbox_limit_starts", f"job_id = {third.id}") == 1  # kept
    assert 58_000 < verdicts[1].wait_ms <= 59_000


def test_starts_older_than_the_window_no_longer_count(conn: Connection) -> None:
    seed_jobs(conn, 2)
    first, second = _claim(conn, 2)
    scope = LimitScope(KEY, rate=1, window_ms=60_000)
    assert [v.admitted for v in _admit(conn, [first], scope)] == [True]
    conn.execute_sql("UPDATE outbox_limit_starts SET started_at = started_at - 61000")
    assert [v.admitted for v in _admit(conn, [second], scope)] == [True]
    assert count(conn, "outbox_limit_starts") == 1  # the old start was pruned


def test_jobs_past_the_room_go_back_at_once_keeping_their_place(conn: Connection) -> None:
    seed_jobs(conn, 3)
    jobs = _claim(conn, 3)
    due = [_row(conn, j.id)[2] for j in jobs]
    verdicts = _admit(conn, jobs, LimitScope(KEY, concurrency=10), room=1)
    assert [(v.admitted, v.wait_ms) for v in verdicts] == [(True, 0), (False, 0), (False, 0)]
    assert [_row(conn, j.id) for j in jobs[1:]] == [(0, None, due[1]), (0, None, due[2])]
    assert count(conn, "outbox_limit_slots") == 1


def test_a_job_under_two_scopes_needs_room_in_both(conn: Connection) -> None:
    seed_jobs(conn, 2)
    first, second = _claim(conn, 2)
    queue_scope = LimitScope("q" * 64, concurrency=1)
    job_scope = LimitScope(KEY, concurrency=5)
    asks = [LimitAsk(first, (queue_scope, job_scope)), LimitAsk(second, (job_scope,))]
    verdicts = conn.driver.limit_admit(LimitAdmit(W1, LEASE_MS, 10, asks))
    assert [v.admitted for v in verdicts] == [True, True]
    seed_jobs(conn, 1)
    (third,) = _claim(conn, 1)
    (denied,) = conn.driver.limit_admit(
        LimitAdmit(W1, LEASE_MS, 10, [LimitAsk(third, (job_scope, queue_scope))])
    )
    assert not denied.admitted
    assert count(conn, "outbox_limit_waits", f"job_id = {third.id}") == 1


# -- the worker's side, in-process -------------------------------------------------------


def _worker_run(database: Database, registry: Registry, **kw: Any) -> Any:
    with Worker(database, registry, WorkerConfig(**kw)) as worker:
        while worker.run_once():
            pass
    return worker.stats


def test_a_concurrency_key_that_fails_dead_letters_its_job_and_the_worker_goes_on(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    ran: list[Any] = []

    @registry.job("k.keyed", concurrency=1, concurrency_key=lambda p: p["account"])
    def keyed(payload: Any, ctx: JobContext) -> None:
        ran.append(payload)

    push(app_conn, Job("k.keyed", {"nope": 1}))  # the key raises KeyError
    push(app_conn, Job("k.keyed", {"account": 1.5}))  # the key is a float
    push(app_conn, Job("k.keyed", {"account": "a"}))
    app_conn.commit()
    stats = _worker_run(database, registry)
    assert ran == [{"account": "a"}]
    assert stats.dead == 2
    rows = conn.execute_sql(
        "SELECT exception_class, exception_message FROM outbox_failed_jobs ORDER BY id"
    )
    assert [r[0] for r in rows] == [KEY_ERROR, KEY_ERROR]
    assert "concurrency_key of job 'k.keyed' raised KeyError" in rows[0][1]
    assert "returned a float; it must return a str or an int" in rows[1][1]
    assert count(conn, "outbox_limit_slots") == 0


def test_a_worker_runs_only_as_many_limited_jobs_as_the_limit_allows_and_defers_the_rest(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    started = threading.Event()
    release = threading.Event()

    @registry.job("k.one", concurrency=1)
    def one(payload: Any, ctx: JobContext) -> None:
        started.set()
        release.wait(30)

    for i in range(3):
        push(app_conn, Job("k.one", {"i": i}))
    app_conn.commit()
    with Worker(database, registry, WorkerConfig(concurrency=4, prefetch=4)) as worker:
        assert worker.run_once(timeout=0.2) == 3  # claimed 3, admitted 1
        assert started.is_set()
        assert worker.stats.deferred == 2 and worker.stats.claimed == 1
        waiting = conn.execute_sql(
            "SELECT attempts FROM outbox_jobs WHERE reserved_by IS NULL ORDER BY id"
        )
        assert [r[0] for r in waiting] == [0, 0]  # back unspent
        assert count(conn, "outbox_limit_waits") == 2
        release.set()
        worker.run_once()  # the first settles; its slot wakes the oldest waiter
        assert count(conn, "outbox_limit_slots") == 0
        assert count(conn, "outbox_limit_waits") == 1
        while worker.run_once():
            pass
    assert count(conn, "outbox_jobs") == 0
    assert worker.stats.succeeded == 3


def test_a_job_back_before_the_room_is_first_in_line_not_last(conn: Connection) -> None:
    seed_jobs(conn, 3)
    first, second, third = _claim(conn, 3)
    scope = LimitScope(KEY, rate=1, window_ms=60_000)
    assert [v.admitted for v in _admit(conn, [first, second, third], scope)] == [
        True,
        False,
        False,
    ]
    # The second's ticket time has come, but the first started later than planned:
    # the window frees in 10 s, and the third holds the ticket after it.
    conn.execute_sql(
        f"UPDATE outbox_limit_starts SET started_at = started_at - 1000 - 60000 "
        f"WHERE job_id = {second.id}"
    )
    conn.execute_sql(
        "UPDATE outbox_limit_starts SET started_at = started_at - 50000 WHERE job_id IS NULL"
    )
    conn.execute_sql(f"UPDATE outbox_jobs SET available_at = 0 WHERE id = {second.id}")
    (again,) = _claim(conn, 1)
    (verdict,) = _admit(conn, [again], scope)
    assert again.id == second.id and not verdict.admitted
    assert 9_000 < verdict.wait_ms <= 10_000  # when the window frees, ahead of the third


def test_a_running_job_keeps_its_slot_past_the_first_lease_through_heartbeats(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    """The worker's heartbeat renews the slot with the lease: a job running longer than
    one lease still holds it, so no other worker may take a second slot meanwhile."""
    registry = Registry()
    started = threading.Event()

    @registry.job("k.long", concurrency=1)
    def long(payload: Any, ctx: JobContext) -> None:
        started.set()
        time.sleep(1.8)

    push(app_conn, Job("k.long", {}))
    app_conn.commit()
    config = WorkerConfig(lease=0.6, sleep=0.05, stop_when_empty=True, listen=False)
    worker = Worker(database, registry, config)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert started.wait(10)
        time.sleep(1.2)  # two leases past the start
        now = conn.driver.clock_now()
        expiries = [r[0] for r in conn.execute_sql("SELECT expires_at FROM outbox_limit_slots")]
        assert len(expiries) == 1 and expiries[0] > now, (expiries, now)
    finally:
        runner.join(30)
    assert worker.stats.succeeded == 1 and count(conn, "outbox_limit_slots") == 0


def test_prune_deletes_only_what_no_admission_will_read_again(conn: Connection) -> None:
    """Idle keys an hour old go with their spent starts and long-expired slots; a key in
    use keeps its row, slots, starts and waits; a pruned key comes back at its next use."""
    seed_jobs(conn, 6)
    jobs = _claim(conn, 6)
    busy, idle_rate, idle_slot = "busy", "idle-rate", "idle-slot"
    _admit(conn, jobs[:2], LimitScope(busy, concurrency=1))  # one runs, one waits
    _admit(conn, jobs[2:3], LimitScope(idle_rate, rate=5, window_ms=1_000))
    _admit(conn, jobs[3:4], LimitScope(idle_slot, concurrency=3))
    hour = 3_600_000
    conn.execute_sql(f"UPDATE outbox_limits SET created_at = created_at - {2 * hour}")
    conn.execute_sql(
        f"UPDATE outbox_limit_starts SET started_at = started_at - {2 * hour} "
        f"WHERE limit_key = '{idle_rate}'"
    )
    conn.execute_sql(
        f"UPDATE outbox_limit_slots SET expires_at = expires_at - {2 * hour} "
        f"WHERE limit_key = '{idle_slot}'"
    )
    before = {t: count(conn, t) for t in ("outbox_limit_slots", "outbox_limit_waits")}
    assert before == {"outbox_limit_slots": 2, "outbox_limit_waits": 1}
    assert limits.prune(conn.driver) == 2
    keys = {r[0] for r in conn.execute_sql("SELECT limit_key FROM outbox_limits")}
    assert keys == {busy}
    assert count(conn, "outbox_limit_slots") == 1 and count(conn, "outbox_limit_waits") == 1
    assert count(conn, "outbox_limit_starts") == 0
    assert limits.prune(conn.driver) == 0  # nothing left to prune; the busy key stays
    # a waiter whose job left the queue is dropped, while the running slot keeps its key
    conn.execute_sql(f"DELETE FROM outbox_jobs WHERE id = {jobs[1].id}")
    assert limits.prune(conn.driver) == 0 and count(conn, "outbox_limit_waits") == 0
    assert count(conn, "outbox_limits") == 1
    conn.driver.limit_release(W1, [LimitSlot(busy, jobs[0])])
    assert limits.prune(conn.driver) == 1 and count(conn, "outbox_limits") == 0
    # a pruned key is created again by its next admission
    verdicts = _admit(conn, jobs[4:6], LimitScope(idle_slot, concurrency=1))
    assert [v.admitted for v in verdicts] == [True, False]
    assert count(conn, "outbox_limits") == 1


def test_prune_works_in_batches_until_nothing_is_left(conn: Connection, rows: Rows) -> None:
    old = ops.now_ms(conn) - 2 * 3_600_000
    for i in range(5):
        rows.limit_start(rows.limit(f"k{i}", created_at=old), started_at=old)
    assert conn.driver.limit_prune(3_600_000, batch=2) == 5
    assert count(conn, "outbox_limits") == 0 and count(conn, "outbox_limit_starts") == 0
