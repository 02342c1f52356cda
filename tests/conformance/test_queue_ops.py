"""The queue's operations on every backend: claim, ack, release, dead-letter, reap, fence."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job
from outbox.db.connection import Connection
from outbox.db.rows import ClaimedJob, Failure
from outbox.queue import push
from tests.fixtures import queue_ops as ops
from tests.fixtures.workers import count

W1 = "host:1:aaaa"
W2 = "host:2:bbbb"
LEASE_MS = 30_000


def _push(app_conn: Any, n: int, *, queue: str = "default", delay: float = 0) -> list[str]:
    ids = [push(app_conn, Job("t.noop", {"i": i}, queue=queue), delay=delay) for i in range(n)]
    app_conn.commit()
    return ids


def _row(conn: Connection, message_id: str) -> tuple[Any, ...]:
    rows = conn.execute_sql(
        "SELECT attempts, reserved_by, reserved_at, lease_expires_at, available_at, last_error "
        f"FROM outbox_jobs WHERE message_id = '{message_id}'"
    )
    return tuple(rows[0]) if rows else ()


def _expire_leases(conn: Connection) -> None:
    conn.execute_sql(
        "UPDATE outbox_jobs SET lease_expires_at = lease_expires_at - 3600000 "
        "WHERE reserved_by IS NOT NULL"
    )


def test_claim_takes_due_jobs_in_order_and_leases_them(app_conn: Any, conn: Connection) -> None:
    ids = _push(app_conn, 5)
    jobs = ops.claim(conn, "default", 3, W1, LEASE_MS)
    assert [j.message_id for j in jobs] == ids[:3]
    assert all(j.attempts == 1 and j.job_name == "t.noop" for j in jobs)
    attempts, holder, reserved_at, lease, _, _ = _row(conn, ids[0])
    assert (attempts, holder) == (1, W1)
    assert lease - reserved_at == LEASE_MS
    rest = ops.claim(conn, "default", 10, W2, LEASE_MS)
    assert [j.message_id for j in rest] == ids[3:]
    assert ops.claim(conn, "default", 10, W2, LEASE_MS) == []


def test_claim_reads_only_its_queue(app_conn: Any, conn: Connection) -> None:
    _push(app_conn, 2, queue="mail")
    assert ops.claim(conn, "search", 10, W1, LEASE_MS) == []
    assert len(ops.claim(conn, "mail", 10, W1, LEASE_MS)) == 2


def test_delayed_jobs_are_not_claimed_early(app_conn: Any, conn: Connection) -> None:
    (mid,) = _push(app_conn, 1, delay=60)
    assert ops.claim(conn, "default", 10, W1, LEASE_MS) == []
    assert _row(conn, mid)[:2] == (0, None)
    conn.execute_sql("UPDATE outbox_jobs SET available_at = available_at - 61000")
    assert [j.message_id for j in ops.claim(conn, "default", 10, W1, LEASE_MS)] == [mid]


def test_ack_deletes_held_jobs_in_one_batch(app_conn: Any, conn: Connection) -> None:
    _push(app_conn, 4)
    jobs = ops.claim(conn, "default", 4, W1, LEASE_MS)
    assert ops.ack(conn, W1, jobs[:3]) == {j.id for j in jobs[:3]}
    assert count(conn, "outbox_jobs") == 1


def test_a_worker_that_lost_its_lease_cannot_ack_release_renew_or_dead_letter(
    app_conn: Any, conn: Connection
) -> None:
    (mid,) = _push(app_conn, 1)
    (old,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    _expire_leases(conn)
    assert ops.reap(conn, lambda name, recorded: 3).requeued == 1
    (new,) = ops.claim(conn, "default", 1, W2, LEASE_MS)
    before = _row(conn, mid)
    assert ops.ack(conn, W1, [old]) == set()
    assert ops.heartbeat(conn, W1, [old], LEASE_MS) == 0
    assert ops.release(conn, W1, old, 1000, "RuntimeError") is False
    assert ops.release_unspent(conn, W1, [old]) == 0
    assert ops.dead_letter(conn, W1, old, Failure("RuntimeError", "m", "t")) is False
    assert _row(conn, mid) == before
    assert before[:2] == (2, W2)
    assert count(conn, "outbox_failed_jobs") == 0
    assert ops.ack(conn, W2, [new]) == {new.id}


def test_the_same_worker_cannot_ack_an_earlier_attempt(app_conn: Any, conn: Connection) -> None:
    _push(app_conn, 1)
    (first,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    _expire_leases(conn)
    ops.reap(conn, lambda name, recorded: 3)
    (second,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    assert ops.ack(conn, W1, [first]) == set()
    assert ops.ack(conn, W1, [second]) == {second.id}


def test_release_puts_a_failed_attempt_back_after_the_delay(
    app_conn: Any, conn: Connection
) -> None:
    (mid,) = _push(app_conn, 1)
    (job,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    assert ops.release(conn, W1, job, 60_000, "ValueError") is True
    attempts, holder, _, lease, available_at, error = _row(conn, mid)
    assert (attempts, holder, lease, error) == (1, None, None, "ValueError")
    assert 50_000 < available_at - ops.now_ms(conn) <= 60_000
    assert ops.claim(conn, "default", 1, W1, LEASE_MS) == []


def test_release_unspent_gives_the_attempt_back_and_keeps_the_place(
    app_conn: Any, conn: Connection
) -> None:
    ids = _push(app_conn, 3)
    before = [_row(conn, m)[4] for m in ids]
    jobs = ops.claim(conn, "default", 3, W1, LEASE_MS)
    assert ops.release_unspent(conn, W1, jobs) == 3
    assert [_row(conn, m)[:2] for m in ids] == [(0, None)] * 3
    assert [_row(conn, m)[4] for m in ids] == before
    assert [j.message_id for j in ops.claim(conn, "default", 3, W2, LEASE_MS)] == ids


def test_dead_letter_moves_the_job_with_class_message_and_trace(
    app_conn: Any, conn: Connection
) -> None:
    (mid,) = _push(app_conn, 1)
    (job,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    failure = Failure("mymod.Broken", "it broke", "Traceback ...\nmymod.Broken: it broke\n")
    assert ops.dead_letter(conn, W1, job, failure) is True
    assert count(conn, "outbox_jobs") == 0
    row = conn.execute_sql(
        "SELECT message_id, job_name, attempts, exception_class, exception_message, "
        "exception_trace, payload FROM outbox_failed_jobs"
    )
    assert tuple(row[0]) == (mid, "t.noop", 1, "mymod.Broken", "it broke", failure.trace, '{"i":0}')


def test_reap_requeues_expired_leases_and_dead_letters_at_the_limit(
    app_conn: Any, conn: Connection
) -> None:
    young, old = _push(app_conn, 2)
    ops.claim(conn, "default", 2, W1, LEASE_MS)
    conn.execute_sql(f"UPDATE outbox_jobs SET attempts = 3 WHERE message_id = '{old}'")
    _expire_leases(conn)
    result = ops.reap(conn, lambda name, recorded: 3)
    assert (result.requeued, result.dead) == (1, 1)
    assert _row(conn, young)[:2] == (1, None)
    assert _row(conn, young)[5] == ops.LEASE_EXPIRED
    dead = conn.execute_sql("SELECT message_id, exception_class FROM outbox_failed_jobs")
    assert [tuple(r) for r in dead] == [(old, ops.LEASE_EXPIRED)]


def test_reap_leaves_a_job_renewed_or_finished_after_its_scan_alone(
    app_conn: Any, conn: Connection
) -> None:
    renewed, finished = _push(app_conn, 2)
    jobs = ops.claim(conn, "default", 2, W1, LEASE_MS)
    _expire_leases(conn)
    scanned = [ops.Expired(j.id, j.attempts, None, W1, j.job_name) for j in jobs]
    ops.heartbeat(conn, W1, jobs[:1], LEASE_MS)
    ops.ack(conn, W1, jobs[1:])
    assert ops.reap_release(conn, scanned[0]) == 0
    assert ops.reap_dead(conn, scanned[1]) is False
    assert _row(conn, renewed)[:2] == (1, W1)
    assert _row(conn, finished) == ()
    assert count(conn, "outbox_failed_jobs") == 0


def test_heartbeat_renews_every_held_lease(app_conn: Any, conn: Connection) -> None:
    ids = _push(app_conn, 3)
    jobs = ops.claim(conn, "default", 3, W1, 1_000)
    assert ops.heartbeat(conn, W1, jobs, 600_000) == 3
    now = ops.now_ms(conn)
    assert all(_row(conn, m)[3] - now > 500_000 for m in ids)


def test_reap_is_a_no_op_when_nothing_expired(app_conn: Any, conn: Connection) -> None:
    _push(app_conn, 2)
    ops.claim(conn, "default", 2, W1, LEASE_MS)
    assert ops.reap(conn, lambda name, recorded: 3) == ops.ReapResult(0, 0)
    assert count(conn, "outbox_jobs", "reserved_by IS NOT NULL") == 2


@pytest.mark.parametrize("limit", [1, 7])
def test_claim_returns_at_most_the_limit(app_conn: Any, conn: Connection, limit: int) -> None:
    _push(app_conn, 10)
    jobs = ops.claim(conn, "default", limit, W1, LEASE_MS)
    assert len(jobs) == limit
    assert count(conn, "outbox_jobs", "reserved_by IS NOT NULL") == limit
    assert isinstance(jobs[0], ClaimedJob)


def test_ack_and_claim_acknowledges_held_jobs_and_claims_the_next(
    app_conn: Any, conn: Connection
) -> None:
    """One statement on PostgreSQL (job_ack_claim), the two operations elsewhere."""
    ids = _push(app_conn, 5)
    first = ops.claim(conn, "default", 2, W1, LEASE_MS)
    stolen = ops.claim(conn, "default", 1, W2, LEASE_MS)
    acked, nxt = ops.ack_and_claim(conn, W1, [*first, *stolen], "default", 2, LEASE_MS)
    assert acked == {j.id for j in first}
    assert [j.message_id for j in nxt] == ids[3:5]
    left = conn.execute_sql("SELECT message_id FROM outbox_jobs ORDER BY id")
    assert [r[0] for r in left] == ids[2:]
    assert _row(conn, ids[2])[1] == W2


def test_a_finished_jobs_id_is_never_reused_so_its_stale_fence_hits_nothing(
    app_conn: Any, conn: Connection
) -> None:
    _push(app_conn, 1)
    (old,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    assert ops.ack(conn, W1, [old]) == {old.id}
    (new_id,) = _push(app_conn, 1)
    (new,) = ops.claim(conn, "default", 1, W1, LEASE_MS)
    assert new.id != old.id and new.attempts == old.attempts
    assert ops.ack(conn, W1, [old]) == set()
    assert ops.release(conn, W1, old, 0, "RuntimeError") is False
    assert _row(conn, new_id)[:2] == (1, W1)
