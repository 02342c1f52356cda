"""Every operation of the driver seam, called directly on every backend.

Each test calls ``conn.driver`` (``d``) itself, with the params object the services
build, and asserts what the operation returns and what it changed. The guard at the end
reads the ``Driver`` Protocol and fails for an operation no test here calls: a new
operation comes with its conformance test.
"""

from __future__ import annotations

import ast
import hashlib
import time
from pathlib import Path

import orjson
import pytest

from outbox import Job, Workflow, record
from outbox.db.connection import Connection
from outbox.db.driver import CANCELLED, JOBS_CHANNEL, LEASE_EXPIRED, RELAY_CHANNEL, Driver
from outbox.db.rows import (
    ClaimedJob,
    DashboardJobs,
    Failure,
    JobClaim,
    JobDeadLetter,
    JobFence,
    JobRelease,
    JobReleaseUnspent,
    JobSnooze,
    LimitAdmit,
    LimitAsk,
    LimitScope,
    LimitSlot,
    OutboxHandoff,
    StoredIntent,
)
from outbox.errors import DatabaseError, MessageNotFound
from outbox.job import BLOCKED_OFFSET_MS
from outbox.queue import push
from outbox.queue.control import cancel, pause, resume
from tests.fixtures.factories import count_rows
from tests.fixtures.relays import set_column

W = "w:ops"
LEASE_MS = 30_000
FAILURE = Failure("ValueError", "boom", "trace")


def _push(conn: Connection, n: int = 1, queue: str = "q") -> list[str]:
    with conn.transaction():
        return [push(conn.raw, Job("t.job", {"i": i}, queue=queue)) for i in range(n)]


def _record(conn: Connection, *keys: str, queue: str = "q") -> list[str]:
    with conn.transaction():
        return [record(conn.raw, key, Job("t.job", {"k": key}, queue=queue)) for key in keys]


def _claim(
    conn: Connection, limit: int = 10, queue: str = "q", lease_ms: int = LEASE_MS
) -> list[ClaimedJob]:
    return conn.driver.job_claim(JobClaim(queue, limit, W, lease_ms))


def _expired(conn: Connection, n: int = 1) -> list[ClaimedJob]:
    """``n`` jobs claimed with a lease already run out."""
    _push(conn, n)
    jobs = _claim(conn, lease_ms=1)
    time.sleep(0.05)
    return jobs


def _fence(*jobs: ClaimedJob) -> JobFence:
    return JobFence(W, jobs)


# -- clock and session ----------------------------------------------------------------


def test_clock_now_is_the_database_clock_in_ms(conn: Connection) -> None:
    assert abs(conn.driver.clock_now() - time.time() * 1000) < 60_000


def test_session_start_worker_leaves_the_connection_usable(conn: Connection) -> None:
    d = conn.driver
    d.session_start_worker()
    _push(conn)
    assert len(_claim(conn)) == 1


def test_listen_statement_only_where_listen_exists(conn: Connection) -> None:
    d = conn.driver
    if conn.dialect.supports_listen:
        assert d.listen_statement(RELAY_CHANNEL) != d.listen_statement(JOBS_CHANNEL)
        with pytest.raises(DatabaseError):
            d.listen_statement("elsewhere")
    else:
        with pytest.raises(DatabaseError):
            d.listen_statement(RELAY_CHANNEL)


# -- jobs -----------------------------------------------------------------------------


def test_job_claim_holds_due_jobs_with_the_attempt_counted(conn: Connection) -> None:
    ids = _push(conn, 3)
    jobs = conn.driver.job_claim(JobClaim("q", 2, W, LEASE_MS))
    assert [j.message_id for j in jobs] == ids[:2]
    assert all(j.attempts == 1 for j in jobs)
    assert _claim(conn)[0].message_id == ids[2]


def test_job_ack_deletes_held_jobs_only(conn: Connection) -> None:
    _push(conn, 2)
    jobs = _claim(conn)
    d = conn.driver
    assert d.job_ack(_fence(jobs[0])) == {jobs[0].id}
    assert d.job_ack(JobFence("w:other", [jobs[1]])) == set()
    assert d.job_ack(_fence()) == set()
    assert d.queue_job_count("q") == 1


def test_job_ack_claim_acks_and_claims_in_one_go(conn: Connection) -> None:
    _push(conn, 2)
    first = _claim(conn, limit=1)
    acked, claimed = conn.driver.job_ack_claim(_fence(*first), JobClaim("q", 5, W, LEASE_MS))
    assert acked == {first[0].id}
    assert len(claimed) == 1 and claimed[0].id != first[0].id
    assert conn.driver.job_ack_claim(_fence(), JobClaim("q", 5, W, LEASE_MS)) == (set(), [])


def test_job_ack_in_tx_commits_with_the_callers_transaction(conn: Connection) -> None:
    _push(conn)
    (job,) = _claim(conn)
    d = conn.driver
    with pytest.raises(RuntimeError), conn.transaction():
        assert d.job_ack_in_tx(_fence(job))
        raise RuntimeError("roll back")
    assert d.queue_job_count("q") == 1
    with conn.transaction():
        assert d.job_ack_in_tx(_fence(job))
    assert d.queue_job_count("q") == 0


def test_job_heartbeat_renews_held_leases(conn: Connection) -> None:
    _push(conn, 2)
    jobs = _claim(conn)
    d = conn.driver
    assert d.job_heartbeat(_fence(*jobs), LEASE_MS) == 2
    assert d.job_heartbeat(JobFence("w:other", jobs), LEASE_MS) == 0
    assert d.job_heartbeat(_fence(), LEASE_MS) == 0


def test_heartbeats_within_one_millisecond_still_count_every_held_job(conn: Connection) -> None:
    """Back-to-back heartbeats land in the same millisecond (and so on the same lease):
    MariaDB, which counts changed rows only, reported 0 jobs held for those."""
    _push(conn, 2)
    jobs = _claim(conn)
    d = conn.driver
    assert [d.job_heartbeat(_fence(*jobs), LEASE_MS) for _ in range(50)] == [2] * 50


def test_job_release_returns_a_failed_attempt(conn: Connection) -> None:
    _push(conn)
    (job,) = _claim(conn)
    d = conn.driver
    assert d.job_release(JobRelease(W, job, 0, "ValueError"))
    assert not d.job_release(JobRelease(W, job, 0, "ValueError"))  # no longer held
    (again,) = _claim(conn)
    assert again.attempts == 2


def test_job_release_unspent_refunds_the_attempt(conn: Connection) -> None:
    _push(conn, 2)
    jobs = _claim(conn)
    d = conn.driver
    assert d.job_release_unspent(JobReleaseUnspent(_fence(*jobs))) == 2
    assert d.job_release_unspent(JobReleaseUnspent(_fence())) == 0
    assert [j.attempts for j in _claim(conn)] == [1, 1]


def test_job_dead_letter_moves_a_held_job(conn: Connection) -> None:
    (mid,) = _push(conn)
    (job,) = _claim(conn)
    d = conn.driver
    assert d.job_dead_letter(JobDeadLetter(W, job, FAILURE))
    assert not d.job_dead_letter(JobDeadLetter(W, job, FAILURE))
    assert [r.message_id for r in d.dead_list(10)] == [mid]


def test_job_snooze_gives_the_attempt_back_until_the_cap(conn: Connection) -> None:
    _push(conn)
    (job,) = _claim(conn)
    d = conn.driver
    assert d.job_snooze(JobSnooze(W, job, 0, max_snoozes=1)) == "snoozed"
    (again,) = _claim(conn)
    assert again.attempts == 1
    assert d.job_snooze(JobSnooze(W, again, 0, max_snoozes=1)) == "limit"
    assert d.job_snooze(JobSnooze("w:other", again, 0, max_snoozes=5)) == "lost"


def test_job_cancel_of_a_free_job_dead_letters_it_at_once(conn: Connection) -> None:
    (mid,) = _push(conn)
    d = conn.driver
    assert cancel(conn, mid) == "dead"
    with pytest.raises(MessageNotFound):
        cancel(conn, mid)
    detail = d.dead_show(mid)
    assert detail is not None and detail.exception_class == CANCELLED


def test_a_cancelled_held_job_is_flagged_then_settled(conn: Connection) -> None:
    (mid,) = _push(conn)
    (job,) = _claim(conn)
    d = conn.driver
    assert d.job_cancel_settle(W, job) == "lost"  # not cancelled: nothing to settle
    assert cancel(conn, mid) == "flagged"
    assert d.job_cancel_requested(_fence(job)) == {job.id}
    assert d.job_cancel_requested(_fence()) == set()
    assert d.job_snooze(JobSnooze(W, job, 0, max_snoozes=5)) == "cancelled"
    assert d.job_cancel_settle(W, job) == "cancelled"
    assert [r.message_id for r in d.dead_list(10)] == [mid]


def test_job_reap_requeues_and_dead_letters_expired_leases(conn: Connection) -> None:
    jobs = _expired(conn, 2)
    d = conn.driver
    spent = jobs[0].message_id
    result = d.job_reap(lambda name, _row: 1 if name == "t.job" else 3, batch=1)
    assert (result.requeued, result.dead) == (0, 1)
    result = d.job_reap(lambda _name, _row: 5, batch=10)
    assert (result.requeued, result.dead) == (1, 0)
    assert [r.message_id for r in d.dead_list(10)] == [spent]


def test_job_reap_steps_one_by_one(conn: Connection) -> None:
    jobs = _expired(conn, 2)
    d = conn.driver
    scanned = d.job_reap_scan(10)
    assert [e.id for e in scanned] == [j.id for j in jobs]
    assert all(e.holder == W and e.attempts == 1 for e in scanned)
    assert d.job_reap_release(scanned[0]) == 1
    assert d.job_reap_release(scanned[0]) == 0  # no longer held at that attempt
    assert d.job_reap_dead(scanned[1])
    assert not d.job_reap_dead(scanned[1])
    (dead,) = d.dead_list(10)
    detail = d.dead_show(dead.message_id)
    assert detail is not None and detail.exception_class == LEASE_EXPIRED


def test_job_remove_deletes_a_queued_job(conn: Connection) -> None:
    (mid,) = _push(conn)
    d = conn.driver
    assert d.job_remove(mid) == 1
    assert d.job_remove(mid) == 0


# -- the outbox -----------------------------------------------------------------------


def test_outbox_handoff_moves_valid_intents_and_quarantines_the_rest(conn: Connection) -> None:
    good, bad = _record(conn, "k1", "k2")
    set_column(conn, bad, "fingerprint", "0" * 64)
    d = conn.driver
    result = d.outbox_handoff(OutboxHandoff(10), lambda i: None)
    assert (result.claimed, result.handed_off, result.quarantined) == (2, 1, 1)
    assert [m for m, _ in result.quarantined_ids] == [bad]
    assert [j.message_id for j in _claim(conn)] == [good]


def test_outbox_handoff_verifies_in_python_when_asked(conn: Connection) -> None:
    keep, refuse = _record(conn, "k1", "k2")
    d = conn.driver
    result = d.outbox_handoff(
        OutboxHandoff(10, verify_in_python=True),
        lambda i: "refused" if i.message_id == refuse else None,
    )
    assert result.quarantined_ids == ((refuse, "refused"),)
    assert [j.message_id for j in _claim(conn)] == [keep]


def test_outbox_handoff_published_deletes_only_what_the_broker_took(conn: Connection) -> None:
    taken, left = _record(conn, "k1", "k2")
    d = conn.driver
    seen: list[str] = []

    def publish(batch: list[StoredIntent]) -> set[str]:
        seen.extend(i.message_id for i in batch)
        return {taken}

    result = d.outbox_handoff_published(OutboxHandoff(10), lambda i: None, publish)
    assert seen == [taken, left]
    assert (result.claimed, result.handed_off) == (2, 1)
    assert d.outbox_pending_count() == 1
    assert d.queue_job_count("q") == 0  # a broker handoff never fills the SQL queue


def test_outbox_claims_in_tx_lock_and_check(conn: Connection) -> None:
    good, bad = _record(conn, "k1", "k2")
    set_column(conn, bad, "fingerprint", "0" * 64)
    d = conn.driver
    with conn.transaction():
        checked = d.outbox_claim_checked_in_tx(OutboxHandoff(10))
        rows = d.outbox_claim_in_tx(OutboxHandoff(1))
    assert [(i.message_id, reason is None) for i, reason in checked] == [(good, True), (bad, False)]
    assert [i.message_id for i in rows] == [good]
    assert rows[0].job_name == "t.job" and orjson.loads(rows[0].payload) == {"k": "k1"}


def test_outbox_counts_backlog_and_pending(conn: Connection) -> None:
    _record(conn, "k1", "k2")
    d = conn.driver
    assert d.outbox_pending_count() == 2
    pending, oldest, now = d.outbox_backlog()
    assert pending == 2 and oldest is not None and oldest <= now
    counts = d.outbox_counts()
    assert counts.by_state == {"pending": 2} and counts.keys == 2
    assert counts.oldest_pending_ms is not None and counts.oldest_pending_ms <= counts.now_ms


def test_a_quarantined_intent_is_listed_looked_up_and_requeued(conn: Connection) -> None:
    (mid,) = _record(conn, "k1")
    set_column(conn, mid, "fingerprint", "0" * 64)
    d = conn.driver
    d.outbox_handoff(OutboxHandoff(10), lambda i: None)
    (failed,) = d.outbox_failed_list(10)
    assert failed.message_id == mid and failed.reason
    with conn.transaction():
        found = d.outbox_retry_lookup_in_tx(mid)
        assert found is not None and found.state == "failed"
        assert d.outbox_retry_lookup_in_tx("00000000-0000-4000-8000-000000000000") is None
        assert d.outbox_requeue_in_tx(found.intent.id) == 1
    assert d.outbox_pending_count() == 1


def test_outbox_accept_in_tx_reseals_a_quarantined_row_and_its_key(conn: Connection) -> None:
    (mid,) = _record(conn, "k1")
    set_column(conn, mid, "fingerprint", "0" * 64)
    d = conn.driver
    d.outbox_handoff(OutboxHandoff(10), lambda i: None)
    with conn.transaction():
        found = d.outbox_retry_lookup_in_tx(mid)
        assert found is not None
        assert d.outbox_accept_in_tx(found.intent.id, '{"k":"new"}', "f" * 64) == 1
    with conn.transaction():
        again = d.outbox_retry_lookup_in_tx(mid)
    assert again is not None and again.state == "pending"
    assert again.intent.fingerprint == "f" * 64


def test_outbox_prune_deletes_handed_off_keys_only(conn: Connection) -> None:
    _record(conn, "k1", "k2")
    d = conn.driver
    d.outbox_handoff(OutboxHandoff(1), lambda i: None)
    assert d.outbox_prune(0, 100) == 1  # the pending intent's key stays
    assert d.outbox_counts().keys == 1


# -- queue administration -------------------------------------------------------------


def test_queue_counts_and_jobs(conn: Connection) -> None:
    ids = _push(conn, 2)
    _push(conn, 1, queue="other")
    _claim(conn, limit=1)
    d = conn.driver
    by_queue = {c.queue: c for c in d.queue_counts()}
    assert (by_queue["q"].ready, by_queue["q"].reserved) == (1, 1)
    assert by_queue["other"].ready == 1
    assert [j.message_id for j in d.queue_jobs("q", 10)] == ids
    assert len(d.queue_jobs(None, 10)) == 3
    assert d.queue_job_count("other") == 1


def test_dead_letters_are_listed_shown_requeued_and_deleted(conn: Connection) -> None:
    ids = _push(conn, 3)
    for job in _claim(conn):
        conn.driver.job_dead_letter(JobDeadLetter(W, job, FAILURE))
    d = conn.driver
    assert {r.message_id for r in d.dead_list(10)} == set(ids)
    detail = d.dead_show(ids[0])
    assert detail is not None and (detail.exception_message, detail.exception_trace) == (
        "boom",
        "trace",
    )
    assert d.dead_requeue([ids[0]], 100) == 1
    assert d.dead_requeue(None, 1) == 1
    assert d.dead_delete(ids[2]) == 1
    assert d.dead_list(10) == [] and d.dead_show(ids[2]) is None
    assert [j.attempts for j in _claim(conn)] == [1, 1]


def test_queue_clear_empties_one_queue_or_all(conn: Connection) -> None:
    _push(conn, 2)
    _push(conn, 1, queue="other")
    d = conn.driver
    assert d.queue_clear("q") == 2
    assert d.queue_clear(None) == 1


def test_queue_pause_and_resume(conn: Connection) -> None:
    _push(conn)
    d = conn.driver
    pause(conn, "q")
    pause(conn, "q")  # idempotent
    assert set(d.queue_paused()) == {"q"}
    assert _claim(conn) == []
    assert resume(conn, "q")
    assert not resume(conn, "q")
    assert d.queue_paused() == {}
    assert len(_claim(conn)) == 1


# -- throughput -----------------------------------------------------------------------


def test_throughput_add_sums_a_workers_minutes_and_prune_drops_old_ones(conn: Connection) -> None:
    d = conn.driver
    d.throughput_add(W, orjson.dumps([[0, "q", 2, 1, 0]]).decode())
    d.throughput_add(W, orjson.dumps([[0, "q", 1, 0, 1]]).decode())
    since = d.clock_now() - 3_600_000
    rows = d.dashboard_throughput(since)
    assert [(r.queue, r.succeeded, r.retried, r.dead) for r in rows] == [("q", 3, 1, 1)]
    assert d.throughput_prune(3_600_000) == 0
    time.sleep(0.01)
    assert d.throughput_prune(-60_000) == 1  # keep nothing older than a minute ahead
    assert d.dashboard_throughput(since) == []


# -- global limits --------------------------------------------------------------------


def test_limits_admit_release_heartbeat_and_prune(conn: Connection) -> None:
    _push(conn, 2)
    a, b = _claim(conn)
    d = conn.driver
    scope = (LimitScope("key:1", concurrency=1),)
    verdicts = d.limit_admit(LimitAdmit(W, LEASE_MS, 10, [LimitAsk(a, scope), LimitAsk(b, scope)]))
    assert [v.admitted for v in verdicts] == [True, False]
    assert verdicts[1].wait_ms > 0
    slot = LimitSlot("key:1", a)
    # A longer lease than the admission's: the renewal changes the row even within the
    # same millisecond (MariaDB counts only rows an UPDATE changed).
    assert d.limit_heartbeat(W, [slot], LEASE_MS * 2) == 1
    assert d.limit_release(W, [slot]) == 1
    assert d.limit_release(W, [slot]) == 0
    assert d.limit_heartbeat(W, [slot], LEASE_MS) == 0
    time.sleep(0.01)
    assert d.limit_prune(-60_000) == 1  # the key row, left with nothing under it


# -- the scheduler and the dashboard --------------------------------------------------


def test_schedule_keys_recorded_finds_recorded_digests(conn: Connection) -> None:
    (mid,) = _record(conn, "k1")
    digest = hashlib.sha256(b"k1").hexdigest()
    d = conn.driver
    assert d.schedule_keys_recorded([digest, "0" * 64]) == {digest: mid}
    assert d.schedule_keys_recorded([]) == {}


def test_dashboard_counts(conn: Connection) -> None:
    _record(conn, "k1")
    _push(conn, 2)
    _claim(conn, limit=1)
    got = conn.driver.dashboard_counts(10_000)
    assert (got.pending, got.failed) == (1, 0)
    assert got.oldest_pending_ms is not None and got.oldest_pending_ms <= got.now_ms
    assert got.queues["q"] == (1, 0, 0) and got.held == {"q": 1}


def test_dashboard_jobs_pages_each_state(conn: Connection) -> None:
    ids = _push(conn, 3)
    _claim(conn, limit=1)
    d = conn.driver
    page = DashboardJobs("ready", "q", None, -1, 0, 0, 10)
    assert [r[0] for r in d.dashboard_jobs(page)] == ids[1:]
    assert [r[0] for r in d.dashboard_jobs(DashboardJobs("reserved", "q", None, -1, 0, 0, 10))] == [
        ids[0]
    ]
    assert d.dashboard_jobs(DashboardJobs("delayed", "q", None, -1, 0, 0, 10)) == []


def test_dashboard_job_intent_and_payloads(conn: Connection) -> None:
    (job_id,) = _push(conn)
    (intent_id,) = _record(conn, "k1")
    d = conn.driver
    job = d.dashboard_job(job_id)
    assert job is not None and job[0] == job_id
    intent = d.dashboard_intent(intent_id)
    assert intent is not None and intent[0] == intent_id
    assert d.dashboard_job(intent_id) is None and d.dashboard_intent(job_id) is None
    assert orjson.loads(d.dashboard_payload("job", job_id) or "") == {"i": 0}
    assert orjson.loads(d.dashboard_payload("intent", intent_id) or "") == {"k": "k1"}
    assert d.dashboard_payload("dead", job_id) is None


# -- job results (outbox.db.results) ---------------------------------------------------


def test_result_ack_writes_the_results_of_the_jobs_it_acked(conn: Connection) -> None:
    from outbox.db.rows import KeptResult

    _push(conn, 2)
    mine, other = _claim(conn)
    d = conn.driver
    kept = [KeptResult(j, W, 60_000, 5, '{"ok":1}') for j in (mine, other)]
    assert d.result_ack(JobFence(W, [mine]), kept) == {mine.id}  # only the fence's job
    assert d.result_ack(JobFence("w:other", [other]), kept) == set()  # not held: no result
    assert d.result_ack(_fence(), kept) == set()
    got = d.result_get(mine.message_id)
    assert got is not None and (got.status, got.return_value, got.worker_id) == (
        "SUCCESSFUL", '{"ok":1}', W)
    assert got.started_at is not None and got.started_at <= got.finished_at
    assert d.result_get(other.message_id) is None
    state = d.result_job_state(other.message_id)
    assert state is not None and state.reserved_by == W and state.attempts == 1
    assert d.result_job_state(mine.message_id) is None


def test_result_dead_letter_and_in_tx_and_prune(conn: Connection) -> None:
    from outbox.db.rows import KeptResult

    _push(conn, 2)
    dead, tx = _claim(conn)
    d = conn.driver
    failure = Failure("LookupError", "secret", "Traceback...\n  line\nLookupError: secret")
    assert d.result_dead_letter(JobDeadLetter(W, dead, failure), KeptResult(dead, W, 0, 0,
                                                                           None, failure))
    assert not d.result_dead_letter(JobDeadLetter(W, dead, failure),
                                    KeptResult(dead, W, 0, 0, None, failure))
    got = d.result_get(dead.message_id)
    assert got is not None and got.status == "FAILED" and got.exception_class == "LookupError"
    assert "secret" not in (got.exception_trace or "")
    with pytest.raises(RuntimeError), conn.transaction():
        d.result_write_in_tx(KeptResult(tx, W, 60_000, 0, "1"))
        raise RuntimeError("roll back")
    assert d.result_get(tx.message_id) is None
    with conn.transaction():
        d.result_write_in_tx(KeptResult(tx, W, 60_000, 0, "1"))
    with conn.transaction():  # the dead one's retention is over
        conn.execute_sql("UPDATE outbox_job_results SET expires_at = 0 WHERE status = 'FAILED'")
    assert d.result_prune(10) == 1
    assert d.result_get(dead.message_id) is None and d.result_get(tx.message_id) is not None


# -- the guard ------------------------------------------------------------------------


def test_every_driver_operation_is_called_by_this_suite() -> None:
    operations = {
        name for name, value in vars(Driver).items() if callable(value) and not name.startswith("_")
    }
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert len(operations) > 50
    assert sorted(operations - called) == []


def _keyed(conn: Connection, n: int, key: str = "order:1") -> list[str]:
    with conn.transaction():
        return [
            push(conn.raw, Job("t.job", {"i": i}, queue="q", ordering_key=key)) for i in range(n)
        ]


def test_ring_rotate_keeps_every_job_as_it_was(
    conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ring's rotation (``RingTicker`` runs it beside a worker's claims): no ring
    and nothing to do on the heap; on PostgreSQL's ring (``OUTBOX_QUEUE_STORAGE=ring``)
    a rotation, here made due at once, which moves rows with their ids, attempts and
    leases and changes no job."""
    from outbox.db import ring

    monkeypatch.setattr(ring, "EVERY_MS", 0)
    monkeypatch.setattr(ring, "MIN_DEAD", 0)
    d = conn.driver
    _push(conn, 3)
    held = _claim(conn, 1)
    jobs = "SELECT id, message_id, attempts, reserved_by, lease_expires_at FROM outbox_jobs"
    before = sorted(conn.execute_sql(jobs))
    assert d.ring_rotate() == ("rotated" if d.on_ring() else None)
    assert sorted(conn.execute_sql(jobs)) == before
    assert d.job_ack(JobFence(W, held)) == {held[0].id}
    assert [j.attempts for j in _claim(conn)] == [1, 1]


def test_ordering_counts_held_keys_and_heal(conn: Connection) -> None:
    d = conn.driver
    assert d.ordering_counts() == (0, 0)
    _keyed(conn, 3)
    with conn.transaction():
        record(conn.raw, "k:ordered", Job("t.job", {}, queue="q", ordering_key="order:2"))
    assert d.ordering_counts() == (2, 1)  # two jobs wait on one key (the intent is no job)
    (head,) = _claim(conn)
    assert d.job_dead_letter(JobDeadLetter(W, head, Failure("Boom", "boom", ""), hold_key=True))
    ((digest, mid, name, queue),) = d.ordering_held(10)
    assert (mid, name, queue) == (head.message_id, "t.job", "q")
    assert digest == hashlib.sha256(b"order:1").hexdigest()
    assert _claim(conn) == []  # the held key blocks the line
    assert d.ordering_heal(10) == 0  # a held key is no lost turn
    # Code that does not pass turns on (the previous release) takes a keyed job away:
    conn.execute_sql("DELETE FROM outbox_failed_jobs")
    assert d.ordering_held(10) == []
    assert d.ordering_heal(10) == 1  # the next job of the key gets its turn
    assert [orjson.loads(j.payload)["i"] for j in _claim(conn)] == [1]  # one turn, in order


def test_workflow_counts_are_of_unfinished_workflows_and_their_waiting_nodes(
    conn: Connection,
) -> None:
    d = conn.driver
    assert d.workflow_counts() == (0, 0)
    wf = Workflow("w")
    root = wf.add(Job("t.job", {"n": 0}, queue="q"), name="root")
    wf.add(Job("t.job", {"n": 1}, queue="q"), name="a", after=[root])
    wf.add(Job("t.job", {"n": 2}, queue="q"), name="b", after=[root])
    with conn.transaction():
        record(conn.raw, "k:wf", wf)
    assert d.workflow_counts() == (1, 2)  # the root is due, its two children wait
    conn.execute_sql("UPDATE outbox_workflow_nodes SET state = 'succeeded'")
    assert d.workflow_counts() == (0, 0)  # every node finished: nothing runs


def test_ordering_heal_reads_one_page_of_key_rows_a_pass_and_reaches_every_key(
    conn: Connection,
) -> None:
    """250 key rows left without jobs and one key whose waiting jobs lost their turn: a
    pass reads (and here drops) ``limit`` key rows from a random digest, wrapping round,
    so three passes of 100 reach every key, the stranded one included."""
    d = conn.driver
    _keyed(conn, 2, "order:lost")
    with conn.transaction():
        conn.execute_sql(f"DELETE FROM outbox_jobs WHERE available_at < {BLOCKED_OFFSET_MS}")
        rows = ", ".join(f"('{hashlib.sha256(f'empty:{i}'.encode()).hexdigest()}')"
                         for i in range(250))  # the head above was taken by old code
        conn.execute_sql(f"INSERT INTO outbox_ordering_keys (key_digest) VALUES {rows}")
    passes, promoted = [], 0
    for _ in range(3):
        promoted += d.ordering_heal(100)
        passes.append(count_rows(conn, "outbox_ordering_keys"))
    # 100 rows read a pass: all of them dropped but the lost key's, if it was among them
    assert passes[0] in (151, 152) and 51 <= passes[1] <= 53, passes
    assert passes[2] == 1 and promoted == 1  # the lost key's row stays: its job has a turn
    assert len(_claim(conn)) == 1
