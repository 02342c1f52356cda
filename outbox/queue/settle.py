"""The worker's side of the database: every queue write a worker makes, and its counts.

``Settler`` owns the worker's one connection (opened on first use, dropped and reopened
after a database error) and turns outcomes into compare-and-set writes: batched
acknowledgements, retries with backoff, dead letters, releases, heartbeats and the
reaper. A write that finds the job no longer held by this attempt is logged as a lost
lease and changes nothing. A database error is logged by class and paused on; the
jobs it concerned stay leased and come back through the reaper if need be. A database
that refuses to write (``ReadOnlyDatabase``: no wait fixes it) is kept in ``fatal``
instead, and the worker ends on it.

The connection commits without waiting for the disk where the database allows it
(``queue_worker_session``): every write here is one a crash may undo safely — a lost
ack runs the job again, a lost claim or release leaves it to the reaper.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from outbox.db.connection import Connection, Database
from outbox.db.driver import Driver
from outbox.db.reconnect import Reconnect
from outbox.db.rows import (
    ClaimedJob,
    Failure,
    JobClaim,
    JobDeadLetter,
    JobFence,
    JobRelease,
    JobReleaseUnspent,
    JobSnooze,
    KeptResult,
    LimitAdmit,
    LimitAsk,
    LimitSlot,
    LimitVerdict,
)
from outbox.errors import DatabaseError, ReadOnlyDatabase
from outbox.queue import joblog
from outbox.queue.config import WorkerStats
from outbox.queue.control import MAX_SNOOZES
from outbox.queue.execute import Kind, Outcome
from outbox.queue.policy import (
    STOPPED_FAILURE,
    UNKNOWN_DELAY_MS,
    UNKNOWN_FAILURE,
    Action,
    Decision,
    decide,
    decide_by_kind,
    decide_stopped,
)
from outbox.queue.registry import Registry
from outbox.queue.throughput import DEAD, RETRIED, SUCCEEDED, Tally
from outbox.queue.upkeep import RingTicker
from outbox.results import kept_ms

UNKNOWN_JOB = "UnknownJob"
REAP_BATCH = 200
ADMIT_BATCH = 50


class Settler:
    def __init__(
        self,
        database: Database,
        registry: Registry,
        worker_id: str,
        lease_ms: int,
        stats: WorkerStats,
        log: Any,
        pause_s: float,
        tally: Tally | None = None,
        unknown_delay_ms: int = UNKNOWN_DELAY_MS,
    ) -> None:
        self.database = database
        self.registry = registry
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.stats = stats
        self.log = log
        self.reconnect = Reconnect(pause_s, pause_s)
        self.unknown_delay_ms = unknown_delay_ms
        self.tally = tally or Tally(worker_id)  # the dashboard chart's counts
        self._conn: Connection | None = None
        self._ticker: RingTicker | None = None
        self._upkeep_asked = False
        self.in_trouble = False  # the last database operation failed
        self.fatal: ReadOnlyDatabase | None = None  # the first error no retry fixes
        # Jobs decided ACK whose handler keeps its result: their outcome waits here for
        # the batched acknowledgement, which writes it in the ack's transaction.
        self._kept: dict[int, Outcome] = {}

    def claim(self, queue: str, limit: int, done: Sequence[ClaimedJob] = ()) -> list[ClaimedJob]:
        """Acknowledge ``done`` and claim up to ``limit`` jobs, in one round trip if
        the dialect can (jobs that keep a result are acknowledged first, on their own)."""
        done = self._ack_kept(done)
        try:
            claim = JobClaim(queue, limit, self.worker_id, self.lease_ms)
            acked, jobs = self._driver().job_ack_claim(self._fence(done), claim)
        except DatabaseError as exc:
            self._trouble("claim", exc)
            return []
        self.in_trouble = False
        self._count_acked(done, acked)
        self.stats.claimed += len(jobs)
        return jobs

    def ack(self, jobs: Sequence[ClaimedJob]) -> None:
        jobs = self._ack_kept(jobs)
        if not jobs:
            return
        try:
            acked = self._driver().job_ack(self._fence(jobs))
        except DatabaseError as exc:
            self._trouble("ack", exc)
            return
        self._count_acked(jobs, acked)

    def _ack_kept(self, jobs: Sequence[ClaimedJob]) -> Sequence[ClaimedJob]:
        """Acknowledge the jobs of ``jobs`` that keep a result, each result written in
        that transaction (``outbox.results``); return the others. Without kept results,
        nothing happens here."""
        if not self._kept:
            return jobs
        kept = [j for j in jobs if j.id in self._kept]
        if not kept:
            return jobs
        results = [self._kept_result(self._kept.pop(j.id)) for j in kept]
        try:
            acked = self._driver().result_ack(self._fence(kept), results)
        except DatabaseError as exc:
            self._trouble("ack", exc)  # still leased: back through the reaper if need be
        else:
            self._count_acked(kept, acked)
        ids = {j.id for j in kept}
        return [j for j in jobs if j.id not in ids]

    def _kept_result(self, outcome: Outcome, failure: Failure | None = None) -> KeptResult:
        job = outcome.job
        handler = self.registry.get(job.job_name)
        keep_ms = kept_ms(None if handler is None else handler.keep_result_ms, job.message_id)
        keep_ms = keep_ms or 0
        ran_ms = 0 if outcome.ran_s is None else round(outcome.ran_s * 1000)
        return KeptResult(job, self.worker_id, keep_ms, ran_ms, outcome.result, failure)

    def _keeps_result(self, job: ClaimedJob) -> bool:
        handler = self.registry.get(job.job_name)
        keep = None if handler is None else handler.keep_result_ms
        return kept_ms(keep, job.message_id) is not None

    def _name_holds_key(self, job_name: str) -> bool:
        handler = self.registry.get(job_name)
        return handler is not None and handler.dead_letter_holds_key

    def _holds_key(self, job: ClaimedJob) -> bool:
        """Does a dead letter of ``job`` keep its ordering key blocked?"""
        return job.ordering_key is not None and self._name_holds_key(job.job_name)

    def _count_acked(self, jobs: Sequence[ClaimedJob], acked: set[int]) -> None:
        self.stats.succeeded += len(acked)
        self.tally.add(SUCCEEDED, jobs if len(acked) == len(jobs) else
                       [j for j in jobs if j.id in acked])
        if len(acked) < len(jobs):
            self.unchanged([j for j in jobs if j.id not in acked], "ack")

    def unchanged(self, jobs: Sequence[ClaimedJob], during: str) -> None:
        """Jobs an ack or release did not change: cancelled by an operator (recorded
        now), or no longer held (a lost lease)."""
        for job in jobs:
            try:
                outcome = self._driver().job_cancel_settle(self.worker_id, job)
            except DatabaseError as exc:
                self._trouble("cancel", exc)
                return
            if outcome == "cancelled":
                self._cancelled(job)
            else:
                self.lost([job], during)

    def _cancelled(self, job: ClaimedJob) -> None:
        self.stats.cancelled += 1
        joblog.job_cancelled(self.log, job)

    def decide(self, outcome: Outcome, *, cancelled: bool = False, snoozes: int = 0) -> Decision:
        """``outbox.queue.policy.decide`` with this job's limit and handler. The database
        applies the delays by its own clock, so no reading of a clock goes in. The
        policy's rows that need no handler are asked first (``decide_by_kind``): a
        success looks nothing up."""
        job = outcome.job
        decision = decide_by_kind(outcome.kind, cancelled)
        if decision is None:
            handler = self.registry.get(job.job_name)
            decision = decide(
                outcome,
                max_attempts=self.registry.max_attempts(job.job_name, job.max_attempts),
                backoff=None if handler is None else handler.backoff,
                now_ms=0,
                cancelled=cancelled,
                snoozes=snoozes,
            )
        if outcome.result is not None and decision.action is Action.ACK:
            self._kept[job.id] = outcome  # written by its acknowledgement
        return decision

    def apply(self, outcome: Outcome, decision: Decision) -> None:
        """Write ``decision`` for a held job (not ACK, which the worker batches)."""
        job, action = outcome.job, decision.action
        if action is Action.SNOOZE:
            self._snooze(outcome, decision)
        elif action is Action.RELEASE:
            self.release_unspent([job])
        elif action is Action.CANCEL:
            self.unchanged([job], "cancel")
        elif action is Action.LOST:
            self.unchanged([job], "transactional commit")
        elif action in (Action.RETRY, Action.DEAD):
            self._fail(outcome, decision)

    def _snooze(self, outcome: Outcome, decision: Decision) -> None:
        """Back later, attempt given back; the store counts the snoozes, and the one past
        ``MAX_SNOOZES`` is decided again as such (a dead letter)."""
        job = outcome.job
        try:
            p = JobSnooze(self.worker_id, job, decision.delay_ms, MAX_SNOOZES)
            result = self._driver().job_snooze(p)
        except DatabaseError as exc:
            self._trouble("snooze", exc)
            return
        if result == "snoozed":
            self.stats.snoozed += 1
        elif result == "limit":
            self.apply(outcome, self.decide(outcome, snoozes=MAX_SNOOZES))
        elif result == "cancelled":
            self.unchanged([job], "cancel")
        else:
            self.lost([job], "snooze")

    def _fail(self, outcome: Outcome, decision: Decision) -> None:
        job, ran_s = outcome.job, outcome.ran_s
        failure = decision.failure or UNKNOWN_FAILURE
        try:
            driver = self._driver()
            if decision.action is Action.DEAD:
                dead = JobDeadLetter(self.worker_id, job, failure, self._holds_key(job))
                if self._keeps_result(job):  # the FAILED result in the same transaction
                    ok = driver.result_dead_letter(dead, self._kept_result(outcome, failure))
                else:
                    ok = driver.job_dead_letter(dead)
                self.stats.dead += int(ok)
                column = DEAD
            else:
                release = JobRelease(
                    self.worker_id, job, decision.delay_ms, failure.exception_class
                )
                ok = driver.job_release(release)
                self.stats.retried += int(ok)
                column = RETRIED
        except DatabaseError as exc:
            self._trouble("fail", exc)
            return
        if not ok:
            self.unchanged([job], "fail")
            return
        self.tally.add(column, (job,))
        max_attempts = self.registry.max_attempts(job.job_name, job.max_attempts)
        joblog.job_failed(self.log, job, decision.action, failure, ran_s, max_attempts)

    def give_back(self, jobs: Sequence[ClaimedJob]) -> None:
        """Jobs still running when the grace ran out: each back to the queue now, its
        attempt counted (``policy.decide_stopped``), instead of held until its lease
        expires in a worker that is gone."""
        for job in jobs:
            limit = self.registry.max_attempts(job.job_name, job.max_attempts)
            outcome = Outcome(Kind.FAILED, job, STOPPED_FAILURE)
            self._fail(outcome, decide_stopped(job.attempts, limit))

    def release_unspent(self, jobs: Sequence[ClaimedJob]) -> None:
        try:
            unspent = JobReleaseUnspent(self._fence(jobs))
            self.stats.released += self._driver().job_release_unspent(unspent)
        except DatabaseError as exc:
            self._trouble("release", exc)

    def admit(self, asks: list[LimitAsk], room: int) -> list[LimitVerdict]:
        """Admit limited jobs (``outbox.queue.gate``), in transactions of at most
        ``ADMIT_BATCH``. If the database fails, the jobs not yet decided are handed back
        unspent (or, if that fails too, come back through the reaper)."""
        verdicts: list[LimitVerdict] = []
        try:
            driver = self._driver()
            for at in range(0, len(asks), ADMIT_BATCH):  # short transactions: keys are locked
                chunk = asks[at : at + ADMIT_BATCH]
                left = room - sum(v.admitted for v in verdicts)
                p = LimitAdmit(self.worker_id, self.lease_ms, left, chunk)
                verdicts += driver.limit_admit(p)
        except DatabaseError as exc:
            self._trouble("admit", exc)
            done = {v.job.id for v in verdicts}
            self.release_unspent([a.job for a in asks if a.job.id not in done])
            return verdicts
        return verdicts

    def free_slots(self, slots: list[LimitSlot]) -> None:
        """Settled jobs' slots; one lost here expires with its lease."""
        try:
            self._driver().limit_release(self.worker_id, slots)
        except DatabaseError as exc:
            self._trouble("limit release", exc)

    def renew_slots(self, slots: list[LimitSlot]) -> None:
        if not slots:
            return
        try:
            self._driver().limit_heartbeat(self.worker_id, slots, self.lease_ms)
        except DatabaseError as exc:
            self._trouble("heartbeat", exc)

    def release_unknown(self, jobs: Sequence[ClaimedJob]) -> None:
        """No handler here: back to the queue, attempt refunded, loudly (never lost)."""
        for job in jobs:
            self.log.error(
                "job.unknown_name",
                message_id=job.message_id,
                queue=job.queue,
                job=job.job_name,
                attempt=job.attempts,
                retry_in_s=self.unknown_delay_ms / 1000,
            )
        try:
            unspent = JobReleaseUnspent(self._fence(jobs), self.unknown_delay_ms, UNKNOWN_JOB)
            released = self._driver().job_release_unspent(unspent)
        except DatabaseError as exc:
            self._trouble("release", exc)
            return
        self.stats.unknown += released
        self.stats.released += released  # handed back unspent, as worker.stopped counts

    def heartbeat(self, jobs: Sequence[ClaimedJob]) -> set[int]:
        """Renew the leases of ``jobs``; return the ids of those an operator cancelled."""
        if not jobs:
            return set()
        try:
            driver, fence = self._driver(), self._fence(jobs)
            driver.job_heartbeat(fence, self.lease_ms)
            return driver.job_cancel_requested(fence)
        except DatabaseError as exc:
            self._trouble("heartbeat", exc)
            return set()

    def is_paused(self, queue: str) -> bool:
        """Is ``queue`` paused? (False when the database cannot say: the claim itself
        still takes nothing from a paused queue.)"""
        try:
            return queue in self._driver().queue_paused()
        except DatabaseError as exc:
            self._trouble("queue paused", exc)
            return False

    def start_upkeep(self) -> None:
        """On PostgreSQL's ring, start its ``RingTicker`` (the rotation, beside the claims),
        once: asked after a claim round, on the connection the claims use; it never
        opens one (after a database error the next claim does, with its pause)."""
        if self._upkeep_asked or self._conn is None:
            return
        try:
            on_ring = self._driver().on_ring()
        except DatabaseError as exc:
            self._trouble("queue storage", exc)
            return
        self._upkeep_asked = True
        if on_ring:
            self._ticker = RingTicker(self.database)

    def stop_upkeep(self) -> None:
        if self._ticker is not None:
            self._ticker.close()
            self._ticker = None

    def reap(self) -> None:
        """Expired leases back to the queue, or to the dead letters at their limit."""
        try:
            result = self._driver().job_reap(
                self.registry.max_attempts, REAP_BATCH, self._name_holds_key
            )
        except DatabaseError as exc:
            self._trouble("reap", exc)
            return
        if result.requeued or result.dead:
            self.stats.reaped += result.requeued + result.dead
            self.log.warning("queue.reaped", requeued=result.requeued, dead=result.dead)
        if result.unstuck:
            self.log.warning("queue.ordering_unstuck", jobs=result.unstuck)

    def lost(self, jobs: Sequence[ClaimedJob], during: str) -> None:
        self.stats.lost += len(jobs)
        for job in jobs:
            self.log.warning(
                "job.lease_lost",
                message_id=job.message_id,
                queue=job.queue,
                job=job.job_name,
                attempt=job.attempts,
                during=during,
            )

    def flush_tally(self) -> None:
        """Write the chart's counts (``outbox.queue.throughput``); never raises."""
        if not self.tally.pending or (self._conn is None and self.in_trouble):
            return  # kept; no reconnecting for the chart's sake (a stop stays prompt)
        try:
            driver = self._driver()
        except DatabaseError:
            return  # kept for the next flush; the next queue write reports the trouble
        self.tally.flush(driver)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _fence(self, jobs: Sequence[ClaimedJob]) -> JobFence:
        return JobFence(self.worker_id, jobs)

    def _driver(self) -> Driver:
        if self._conn is None:
            conn = self.database.connect()
            try:
                conn.driver.session_start_worker()
            except DatabaseError:
                conn.close()
                raise
            self._conn = conn
            self.reconnect.working()
        return self._conn.driver

    def _trouble(self, during: str, exc: DatabaseError) -> None:
        """Log the error class, drop the connection, pause (``outbox.db.reconnect``);
        leases cover what is held. A read-only database is kept for the worker to end
        on (its one line is the error the worker raises), without a pause."""
        if isinstance(exc, ReadOnlyDatabase):
            self.fatal = self.fatal or exc
            self.in_trouble = True
            self.close()
            return
        cause = type(exc.__cause__).__name__ if exc.__cause__ else type(exc).__name__
        pause = self.reconnect.pause(exc)
        self.log.error("worker.database_error", during=during, error=cause, code=exc.code,
                       retry_in_s=pause)
        self.in_trouble = True
        self.close()
        if pause:
            time.sleep(pause)

