"""Queue control on every backend, in one process: priorities from record() through the
relay to the claim, their fingerprint (old rows still verify), pause/resume, cancel of a
waiting job, snooze and its cap, and bad input refused with the database unchanged.

The racing halves (several worker processes; running jobs cancelled) are in
``tests/integration/test_queue_control_processes.py``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest

from outbox import (
    Job,
    Registry,
    Snooze,
    cancel_job,
    pause_queue,
    paused_queues,
    push,
    record,
    record_many,
    resume_queue,
)
from outbox.db.connection import Connection, Database
from outbox.db.rows import JobClaim
from outbox.errors import IdempotencyConflict, InvalidJob, InvalidMessageId, MessageNotFound
from outbox.ids import new_message_id
from outbox.queue import JobContext, Worker, WorkerConfig
from outbox.queue.control import MAX_SNOOZES, SNOOZE_LIMIT
from outbox.relay import Relay, RelayConfig
from outbox.status import status
from tests.fixtures.databases import placeholder
from tests.fixtures.factories import make_intent
from tests.fixtures.workers import count, wait_until

TABLES = ("outbox_keys", "outbox_messages", "outbox_jobs", "outbox_failed_jobs",
          "outbox_paused_queues")  # fmt: skip


def _counts(conn: Connection) -> dict[str, int]:
    return {t: count(conn, t) for t in TABLES}


def _relay(database: Database, *, in_python: bool = False) -> None:
    with Relay(database, RelayConfig(verify_in_python=in_python)) as relay:
        relay.run_once()


BAD_PRIORITIES = [(10, "from 0 (most urgent) to 9 (got 10)"), (-1, "(got -1)"),
                  (True, "(got bool)"), ("1", "(got str)")]  # fmt: skip


def test_priority_outside_0_to_9_is_refused_and_nothing_is_written(
    conn: Connection, app_conn: Any
) -> None:
    before = _counts(conn)
    for priority, why in BAD_PRIORITIES:
        with pytest.raises(InvalidJob, match="priority must be") as caught:
            record(app_conn, "k:1", Job("t.noop", {}, priority=priority))
        assert why in str(caught.value)
        with pytest.raises(InvalidJob, match="priority must be"):
            push(app_conn, Job("t.noop", {}), priority=priority)
        with pytest.raises(InvalidJob, match="priority must be"):
            push(app_conn, Job("t.noop", {}, priority=priority))
    app_conn.commit()
    assert _counts(conn) == before


@pytest.mark.parametrize("in_python", [False, True], ids=["sql_verify", "python_verify"])
def test_priority_flows_from_record_through_the_relay_to_the_queue(
    database: Database, conn: Connection, app_conn: Any, in_python: bool
) -> None:
    urgent = record(app_conn, "k:urgent", Job("t.noop", {"a": 1}, priority=3))
    plain = record(app_conn, "k:plain", Job("t.noop", {"a": 1}))
    many = record_many(app_conn, [("k:m1", Job("t.noop", {}, priority=6)), ("k:m2", Job("t.noop"))])
    app_conn.commit()
    _relay(database, in_python=in_python)
    rows = dict(conn.execute_sql("SELECT message_id, priority FROM outbox_jobs"))
    assert rows == {urgent: 3, plain: 0, many[0]: 6, many[1]: 0}
    assert count(conn, "outbox_messages") == 0


def test_priority_is_part_of_the_fingerprint(app_conn: Any) -> None:
    first = record(app_conn, "k:1", Job("t.noop", {"a": 1}, priority=2))
    assert record(app_conn, "k:1", Job("t.noop", {"a": 1}, priority=2)) == first
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k:1", Job("t.noop", {"a": 1}, priority=3))
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k:1", Job("t.noop", {"a": 1}))


def _v1_fingerprint(name: str, queue: str, payload: str) -> str:
    """The previous version's layout, written out by hand (no priority in it)."""
    return hashlib.sha256(f"v1\n{name}\n{queue}\n\n\n{payload}".encode()).hexdigest()


@pytest.mark.parametrize("in_python", [False, True], ids=["sql_verify", "python_verify"])
def test_intent_recorded_by_the_previous_version_still_verifies_and_replays(
    database: Database, conn: Connection, app_conn: Any, in_python: bool
) -> None:
    fp, payload = _v1_fingerprint("t.noop", "default", '{"a":1}'), '{"a":1}'
    with conn.transaction():
        mid = make_intent(conn, key="k:old", fingerprint=fp, job_name="t.noop", queue="default",
                          payload=payload, created_at=1)  # fmt: skip
    # The same job replayed by today's code matches the old row: no conflict.
    assert record(app_conn, "k:old", Job("t.noop", {"a": 1})) == mid
    app_conn.commit()
    _relay(database, in_python=in_python)
    assert conn.execute_sql("SELECT message_id, priority FROM outbox_jobs") == [(mid, 0)]


@pytest.mark.parametrize("in_python", [False, True], ids=["sql_verify", "python_verify"])
def test_priority_changed_after_recording_is_quarantined(
    database: Database, conn: Connection, app_conn: Any, in_python: bool
) -> None:
    q = placeholder(conn)
    changes = {}
    for n, (recorded, changed_to) in enumerate([(4, 0), (0, 4), (4, 5)]):
        mid = record(app_conn, f"k:{n}", Job("t.noop", {}, priority=recorded))
        changes[mid] = changed_to
    app_conn.commit()
    with conn.transaction():
        for mid, changed_to in changes.items():
            conn.execute_sql(
                f"UPDATE outbox_messages SET priority = {q} WHERE message_id = {q}",
                (changed_to, mid),
            )
    _relay(database, in_python=in_python)
    rows = conn.execute_sql("SELECT message_id, state, failure_reason FROM outbox_messages")
    assert sorted(rows) == sorted((m, "failed", "fingerprint_mismatch") for m in changes)


def test_claim_takes_the_most_urgent_due_job_first_then_first_due(
    conn: Connection, app_conn: Any
) -> None:
    ids = {}
    for name, p, delay in [("late9", 9, 0), ("a5", 5, 0), ("b5", 5, 0), ("due0", 0, 0),
                           ("future0", 0, 3600)]:  # fmt: skip
        ids[push(app_conn, Job("t.noop", {}), delay=delay, priority=p)] = name
    app_conn.commit()
    claimed = conn.driver.job_claim(JobClaim("default", 10, "w:1:x", 30_000))
    assert [ids[j.message_id] for j in claimed] == ["due0", "a5", "b5", "late9"]


def test_paused_queue_takes_pushes_but_gives_no_claims_until_resumed(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    pause_queue(database, "mail")  # no job yet: it stays paused for those that arrive
    pause_queue(conn, "mail")  # idempotent
    assert paused_queues(database) == ["mail"]
    assert status(conn).queues["mail"].paused is True
    push(app_conn, Job("t.noop", {}, queue="mail"))
    push(app_conn, Job("t.noop", {}, queue="other"))
    app_conn.commit()
    claim = JobClaim("mail", 10, "w:1:x", 30_000)
    assert conn.driver.job_claim(claim) == []
    assert len(conn.driver.job_claim(JobClaim("other", 10, "w:1:x", 30_000))) == 1
    counts = {q.queue: (q.ready, q.paused) for q in conn.driver.queue_counts()}
    assert counts["mail"] == (1, True) and counts["other"][1] is False
    assert resume_queue(database, "mail") is True
    assert resume_queue(database, "mail") is False
    assert paused_queues(database) == []
    assert len(conn.driver.job_claim(claim)) == 1


def test_invalid_queue_name_is_refused_and_nothing_is_paused(
    database: Database, conn: Connection
) -> None:
    for bad in ["", "has space", "x" * 201, "naïve", None]:
        with pytest.raises(InvalidJob, match="queue name"):
            pause_queue(database, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidJob, match="queue name"):
            resume_queue(database, bad)  # type: ignore[arg-type]
    assert count(conn, "outbox_paused_queues") == 0


def test_cancel_moves_a_waiting_job_to_the_dead_letters(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mid = push(app_conn, Job("t.noop", {"k": 1}, priority=4), delay=3600)
    keep = push(app_conn, Job("t.noop", {}))
    app_conn.commit()
    assert cancel_job(database, mid) == "dead"
    assert conn.execute_sql(
        "SELECT message_id, exception_class, attempts, priority FROM outbox_failed_jobs"
    ) == [(mid, "cancelled", 0, 4)]
    assert [r[0] for r in conn.execute_sql("SELECT message_id FROM outbox_jobs")] == [keep]
    # `queue retry` brings it back with its priority.
    assert conn.driver.dead_requeue([mid], 10) == 1
    assert dict(conn.execute_sql("SELECT message_id, priority FROM outbox_jobs"))[mid] == 4


def test_cancel_of_an_unknown_or_malformed_id_changes_nothing(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    push(app_conn, Job("t.noop", {}))
    app_conn.commit()
    before = _counts(conn)
    with pytest.raises(MessageNotFound, match="no job in the queue"):
        cancel_job(database, new_message_id())
    with pytest.raises(InvalidMessageId):
        cancel_job(database, "not-an-id")
    assert _counts(conn) == before


snoozing = Registry()
ATTEMPTS_SEEN: list[int] = []


@snoozing.job("s.twice")
def snooze_twice(payload: Any, ctx: JobContext) -> None:
    ATTEMPTS_SEEN.append(ctx.attempt)
    if len(ATTEMPTS_SEEN) <= 2:
        raise Snooze(0)


@snoozing.job("s.forever")
def snooze_forever(payload: Any, ctx: JobContext) -> None:
    raise Snooze(0)


@snoozing.job("s.bad", max_attempts=1)
def snooze_badly(payload: Any, ctx: JobContext) -> None:
    raise Snooze(-5)


def test_snooze_comes_back_without_spending_an_attempt(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    ATTEMPTS_SEEN.clear()
    push(app_conn, Job("s.twice", {}))
    app_conn.commit()
    with Worker(database, snoozing, WorkerConfig(stop_when_empty=True)) as worker:
        for _ in range(3):
            worker.run_once()
    assert ATTEMPTS_SEEN == [1, 1, 1]
    assert worker.stats.snoozed == 2 and worker.stats.succeeded == 1
    assert _counts(conn)["outbox_jobs"] == 0


def test_snooze_past_the_cap_dead_letters_the_job(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mid = push(app_conn, Job("s.forever", {}))
    app_conn.commit()
    with conn.transaction():
        conn.execute_sql(
            f"UPDATE outbox_jobs SET snoozes = {placeholder(conn)}", (MAX_SNOOZES - 1,)
        )
    with Worker(database, snoozing) as worker:
        worker.run_once()  # the last snooze allowed
        assert conn.execute_sql("SELECT attempts, snoozes FROM outbox_jobs") == [(0, MAX_SNOOZES)]
        worker.run_once()
    assert conn.execute_sql("SELECT message_id, exception_class FROM outbox_failed_jobs") == [
        (mid, SNOOZE_LIMIT)
    ]
    assert count(conn, "outbox_jobs") == 0


def test_snooze_with_a_bad_duration_is_a_failed_attempt(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    push(app_conn, Job("s.bad", {}))
    app_conn.commit()
    with Worker(database, snoozing) as worker:
        worker.run_once()
    ((cls, message),) = conn.execute_sql(
        "SELECT exception_class, exception_message FROM outbox_failed_jobs")  # fmt: skip
    assert cls == "outbox.errors.InvalidJob" and "Snooze(seconds)" in message


def test_run_pending_snoozes_by_the_test_clock_without_spending_an_attempt(
    app_conn: Any,
) -> None:
    from outbox.testing import run_pending

    ATTEMPTS_SEEN.clear()
    record(app_conn, "k:snooze", Job("s.twice", {}))
    first = run_pending(app_conn, snoozing)
    assert [r.outcome for r in first.ran] == ["snoozed", "snoozed", "done"]
    assert ATTEMPTS_SEEN == [1, 1, 1]


cancelling = Registry()
OPERATOR: dict[str, Database] = {}


def _operator_cancels(ctx: JobContext) -> None:
    """The operator runs `outbox queue cancel` while the handler runs; the worker's
    heartbeat (every 10 s at the default lease) has not told it yet."""
    assert cancel_job(OPERATOR["db"], ctx.message_id) == "flagged"
    assert not ctx.cancelled


@cancelling.job("c.returns")
def cancelled_then_returns(payload: Any, ctx: JobContext) -> None:
    _operator_cancels(ctx)


@cancelling.job("c.raises")
def cancelled_then_raises(payload: Any, ctx: JobContext) -> None:
    _operator_cancels(ctx)
    raise RuntimeError("would be retried")


@cancelling.job("c.transactional", transactional=True)
def cancelled_then_commits(payload: Any, ctx: JobContext) -> None:
    _operator_cancels(ctx)


def test_a_job_cancelled_while_it_ran_is_recorded_as_cancelled_whatever_it_did(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    OPERATOR["db"] = database
    names = ["c.returns", "c.raises"]
    if database.dialect.name != "sqlite":
        # On SQLite a transactional handler holds the one writer lock while it runs, so
        # no operator can write a cancel flag until it has committed.
        names.append("c.transactional")
    ids = {push(app_conn, Job(name, {})): name for name in names}
    app_conn.commit()
    with Worker(database, cancelling, WorkerConfig(concurrency=3)) as worker:
        worker.run_once()
    dead = conn.execute_sql("SELECT message_id, exception_class, attempts FROM outbox_failed_jobs")
    assert sorted(dead) == sorted((m, "cancelled", 1) for m in ids)
    assert count(conn, "outbox_jobs") == 0
    assert (worker.stats.succeeded, worker.stats.retried) == (0, 0)
    assert worker.stats.cancelled == len(ids)


buffering = Registry()
STARTED: list[str] = []


@buffering.job("b.slowish")
def slowish(payload: Any, ctx: JobContext) -> None:
    STARTED.append(ctx.message_id)
    time.sleep(0.4)  # room for the dispatcher's claim and pause check, even under load


def test_worker_hands_back_its_unstarted_jobs_of_a_queue_paused_meanwhile(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    STARTED.clear()
    for _ in range(10):
        push(app_conn, Job("b.slowish", {}))
    app_conn.commit()
    config = WorkerConfig(queues={"default": 1}, prefetch=4, sleep=0.05, listen=False)
    worker = Worker(database, buffering, config)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: len(STARTED) == 1, 60, "the first job to start")
        pause_queue(database, "default")  # 1 running, 3 claimed ahead (one claim of 4)
        wait_until(
            lambda: count(conn, "outbox_jobs", "reserved_by IS NOT NULL") == 0,
            60,
            "the worker to finish or hand back what it held",
        )
    finally:
        worker.stop()
        thread.join(60)
    # Without the hand-back all 4 held jobs would run. With it: the running one, the next
    # (its thread takes it at once), and then the claim that frees room finds the queue
    # paused and hands the rest back.
    assert worker.stats.claimed == 4
    assert len(STARTED) <= 2, STARTED
    assert worker.stats.released == 4 - len(STARTED)
    assert count(conn, "outbox_jobs", "attempts = 0") == 10 - len(STARTED)
