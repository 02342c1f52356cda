"""The worker: claims batches, runs handlers, acknowledges in batches, stops gracefully.

One dispatcher thread owns the worker's database connection and does all queue I/O:
claims (one round trip per batch), acknowledgements (one DELETE for every job that
finished since the last one), heartbeats (one UPDATE for every held job), failures,
the reaper, and every 10 s the dashboard's per-minute counts (``outbox.queue.throughput``).
Handlers never touch that connection, so the dispatcher stays responsive
however long they run, and leases are renewed on time.

Per queue, a worker holds at most ``cap + prefetch`` jobs: up to ``cap`` running and up
to ``prefetch`` claimed ahead (adaptive by default: ``outbox.queue.prefetch``). It tops
the queue up as soon as half the prefetch (at least one job) is free, before the
handlers run dry, and the acknowledgements of jobs finished meanwhile ride along in that
claim's round trip; an ack goes alone only when no claim is coming (queue dry, limit
reached, stopping) or after ``ACK_DELAY_S``.
Sync handlers run on ``cap`` threads per queue, async handlers as tasks on one
event loop (at most ``cap`` at a time per queue).

Timeouts: an async handler is cancelled at its ``timeout``. A sync handler cannot be
interrupted: at its timeout the attempt is recorded as failed (``JobTimeout``) and the
job released or dead-lettered as any failure, while the thread keeps running the
handler to its end with its result ignored and its slot occupied. The job may then run
elsewhere while the old call is still going: give such handlers idempotent effects.

Stopping: ``stop()`` (SIGTERM/SIGINT in the CLI) ends claiming, hands unstarted jobs
back without spending an attempt, and waits up to ``grace`` seconds for running jobs;
calling it again changes nothing. ``stop_now()`` (a second signal) returns at once;
leases of jobs still running then expire and the reaper returns them to the queue.

Queue control (``outbox.queue.control``): the claim takes nothing from a paused queue,
so a ``stop_when_empty`` worker on one exits at once; when such a claim comes back empty
while sync jobs of the queue wait unstarted in the buffer, the worker checks the pause
and hands them back. The heartbeat also reads which
held jobs an operator cancelled; their handlers see ``ctx.cancelled``, async ones are
cancelled, and every outcome of such a job is recorded as a cancellation. A handler
that raises ``Snooze`` sends its job back for later with the attempt given back.

Global limits: jobs whose name has ``concurrency``/``rate`` limits, or whose queue has
a ``queue_limits`` cap, pass ``outbox.queue.gate`` between claim and dispatch (see there);
other jobs never touch it, and a registry without limits skips it altogether.

Stepping: ``run_once()`` claims, dispatches and settles one round and returns, so an
application's or a test's code decides when the next round happens; ``close()`` then
ends the handler threads. ``clock`` (monotonic seconds) is injected, and the worker reads
time through it only: heartbeats, reaps, timeouts, stalls, limits, ``max_time``, the
grace and ``run_once``'s wait. ``hooks`` (``outbox.hooks``) hears what happens.

The parts, each in its module: ``held`` (what this worker holds), ``pools`` (the
handlers' threads and loop), ``gate`` (global limits), ``policy`` (what follows an
attempt), ``settle`` (the writes), ``prefetch`` (how far to claim ahead).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from queue import Empty, SimpleQueue
from typing import Any

import structlog

from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.driver import JOBS_CHANNEL
from outbox.db.listen import Listener
from outbox.db.rows import ClaimedJob
from outbox.hooks import NO_HOOKS, Hooks
from outbox.queue import signals
from outbox.queue.config import WorkerConfig, WorkerStats, new_worker_id
from outbox.queue.execute import JobTimeout, Kind, Outcome, failure_of
from outbox.queue.gate import Gate
from outbox.queue.held import Held
from outbox.queue.policy import Action
from outbox.queue.pools import Pools
from outbox.queue.prefetch import Prefetch
from outbox.queue.registry import Registry
from outbox.queue.settle import UNKNOWN_JOB, Settler
from outbox.queue.throughput import FLUSH_EVERY_S, SUCCEEDED

__all__ = ["UNKNOWN_JOB", "Worker", "WorkerConfig", "WorkerStats"]

log = structlog.get_logger("outbox.worker")

WAKE = object()
ACK_DELAY_S = 0.05
STEP_TIMEOUT_S = 30.0


class Worker:
    """Runs jobs of ``registry`` from ``config.queues`` until stopped or a limit is hit."""

    def __init__(
        self,
        database: Database,
        registry: Registry,
        config: WorkerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.database = database
        self.registry = registry
        self.config = config or WorkerConfig()
        self.config.check()
        self.hooks = hooks
        self._clock = clock
        self.worker_id = new_worker_id()
        self.stats = WorkerStats()
        self._caps = self.config.caps()
        self._prefetch = {q: Prefetch(cap, self.config.prefetch) for q, cap in self._caps.items()}
        self._results: SimpleQueue[Any] = SimpleQueue()
        self._stopping = threading.Event()
        self._stop_requests = 0  # 1: stop gracefully, 2: stop now
        # Set while the last claim round found nothing to claim (for monitoring and tests).
        self.idle = threading.Event()
        self.listener: Listener | None = None
        self._pools: Pools | None = None
        self._stop_reason: str | None = None
        self._ack_since = 0.0
        self._held = Held(self._caps, clock)
        self._to_ack: list[ClaimedJob] = []
        self._dry: dict[str, float] = {}  # per queue: claim again at (by the clock)
        self._stop_deadline: float | None = None
        self._tally_due = 0.0  # when the chart's counts are next written (throughput.py)
        self._log = log.bind(worker_id=self.worker_id)
        self._gate = Gate(registry, self.config.queue_limits)
        self._gating = self._gate.active  # False: claimed jobs never see the gate
        lease_ms = round(self.config.lease * 1000)
        pause_s = min(self.config.sleep, 1.0)
        self._db = Settler(database, registry, self.worker_id, lease_ms, self.stats, self._log,
                           pause_s)

    # -- control ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop gracefully: no new claims, running jobs finish (up to ``grace``), the
        unstarted go back. Idempotent.

        Safe from a signal handler: it only sets a number and puts a wake-up on a
        ``SimpleQueue`` (whose ``put`` is reentrant); the loop does the rest.
        """
        self._stop_requests = max(self._stop_requests, 1)
        self._results.put(WAKE)

    def stop_now(self) -> None:
        """Stop at once, without waiting for running jobs (their leases expire)."""
        self._stop_requests = 2
        self._results.put(WAKE)

    def wake(self) -> None:
        """Claim now instead of at the next poll (NOTIFY arrived). Thread-safe."""
        self._results.put(WAKE)

    def signals_handled(self) -> AbstractContextManager[None]:
        """SIGTERM/SIGINT: first stops gracefully, second at once. Main thread only."""
        return signals.handled(self.stop, self.stop_now, lambda: bool(self._stop_requests))

    # -- the loop -----------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Run until stopped, empty (``stop_when_empty``) or a limit; return the stats."""
        self._start_pools()
        listener = self.listener = self._start_listener()
        prefetch = "adaptive" if self.config.prefetch is None else self.config.prefetch
        self._log.info("worker.started", queues=self._caps, prefetch=prefetch)
        try:
            self._loop()
        finally:
            self._shutdown(listener)
        return self.stats

    def run_once(self, timeout: float = STEP_TIMEOUT_S) -> int:
        """One round: reap, claim for every queue with room, run what was claimed and
        settle every outcome (acknowledge, retry, dead-letter). Returns how many jobs
        it claimed. Waits up to ``timeout`` seconds (by the worker's clock: a fake one
        must be advanced) for the round's handlers; jobs still running then stay held
        and settle in a later round. No LISTEN, no sleeping: the caller decides when the
        next round happens; ``close()`` ends the threads.
        """
        self._start_pools()
        self._db.reap()
        self._dry.clear()
        claimed = self._claim_round()
        now = self._clock()
        deadline, next_beat = now + timeout, now + self.config.lease / 3
        while self._held and now < deadline:
            self._check_timeouts(now)
            if now >= next_beat:
                self._heartbeat()
                next_beat = now + self.config.lease / 3
            self._wait_for_outcome(min(deadline - now, 0.1))
            self._collect()
            now = self._clock()
        self._flush_acks()
        self._flush_tally(self._clock())
        return claimed

    def close(self) -> None:
        """End the handler threads and the connection of a worker driven by ``run_once``
        (``run`` does this itself). Jobs still held come back through the reaper."""
        if self._pools is not None:
            self._shutdown(None)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_pools(self) -> Pools:
        if self._pools is None:
            self._pools = Pools(
                self.registry, self.worker_id, self.database, self.hooks, self._caps,
                self._results, self._stopping, self._held.began, self._clock,
            )
        return self._pools

    def _start_listener(self) -> Listener | None:
        if not (self.config.listen and self.database.dialect.supports_listen) or settings.pooler:
            return None
        return Listener(self.database, JOBS_CHANNEL, self.wake, owner="worker")

    def _loop(self) -> None:
        cfg = self.config
        began = self._clock()
        next_beat = began + cfg.lease / 3
        reap_every = cfg.reap_every or max(cfg.lease / 2, 0.05)
        next_reap = began
        self._tally_due = began + FLUSH_EVERY_S
        while self._stop_requests < 2:
            now = self._clock()
            if self._stop_requests:
                self._begin_stop("signal")
            if cfg.max_time is not None and now - began >= cfg.max_time:
                self._begin_stop("max_time")
            if now >= next_reap:
                self._db.reap()
                next_reap = now + reap_every
            if now >= next_beat:
                self._heartbeat()
                self.hooks.worker_tick(len(self._held) + len(self._to_ack))
                next_beat = now + cfg.lease / 3
            self._flush_tally(now)
            self._check_timeouts(now)
            self._check_stalls(now)
            if self._stop_reason:
                if self._stop_step(now):
                    return
            elif self._should_exit_empty(self._claim_round()):
                return
            self._wait(min(next_beat, next_reap) - self._clock())
            self._collect()

    # -- claiming -----------------------------------------------------------------

    def _claim_round(self) -> int:
        """Claim for every queue that has room; hand the jobs to their runners."""
        claimed = 0
        now = self._clock()
        for queue, cap in self._caps.items():
            while self._has_room(queue, cap, now):
                prefetch = self._prefetch[queue].value
                room = cap + prefetch - self._held.count(queue)
                limit = self._within_max_jobs(min(prefetch, room))
                if queue in self._gate.gated:  # claim no more limited jobs than can start
                    limit = min(limit, cap - self._held.count(queue))
                if limit <= 0:
                    break
                jobs = self._claim(queue, limit)
                claimed += len(jobs)
                got = len(jobs)
                if self._gating:
                    jobs = self._through_gate(queue, jobs)
                self._dispatch(queue, jobs)
                if got < limit:
                    self._dry[queue] = min(now + self.config.sleep, self._gate.next_due(queue, now))
                    if not got:
                        self._release_if_paused(queue)
                    break
        (self.idle.set if not claimed and not self._held else self.idle.clear)()
        return claimed

    def _has_room(self, queue: str, cap: int, now: float) -> bool:
        """Claim for ``queue`` now? Once half the prefetch is free: big enough batches
        to keep round trips few, early enough that the handlers never wait on one."""
        prefetch = self._prefetch[queue].value
        free = cap + prefetch - self._held.count(queue)
        return (
            free >= max(1, prefetch // 2)
            and self._dry.get(queue, 0) <= now
            and queue not in self._gate.full
            and not self._stalled(queue, now)
        )

    def _within_max_jobs(self, limit: int) -> int:
        if self.config.max_jobs is None:
            return limit
        remaining = self.config.max_jobs - self.stats.claimed
        if remaining <= 0:
            self._begin_stop("max_jobs")
        return min(limit, remaining)

    def _claim(self, queue: str, limit: int) -> list[ClaimedJob]:
        """Claim, carrying the pending acknowledgements along (one round trip)."""
        done, self._to_ack = self._to_ack, []
        jobs = self._db.claim(queue, limit, done)
        self._held.add(queue, jobs)
        return jobs

    def _through_gate(self, queue: str, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """Limited jobs start only if admitted (``outbox.queue.gate``), at most as many
        as this queue had free threads before the claim; the others are back in the
        queue, and a job whose key cannot be computed is dead-lettered."""
        free = self._caps[queue] - (self._held.count(queue) - len(jobs))
        passed = self._gate.through(queue, jobs, free, self._clock(), self._db)
        for kf in passed.bad:
            self._forget(kf.job)
            self._settle(Outcome(Kind.PERMANENT, kf.job, kf.failure))
        for job in passed.back:
            self._forget(job)
        self.stats.claimed -= passed.deferred
        self.stats.deferred += passed.deferred
        return passed.start

    def _free_slots(self) -> None:
        """Free the slots of jobs that settled; a job waiting on one may now be ours."""
        slots = self._gate.take_to_free()
        if slots:
            self._db.free_slots(slots)
            for s in slots:
                self._dry.pop(s.job.queue, None)

    def _dispatch(self, queue: str, jobs: list[ClaimedJob]) -> None:
        unknown = self._start_pools().dispatch(queue, jobs)
        if unknown:
            for job in unknown:
                self._forget(job)
            self._db.release_unknown(unknown)

    def _should_exit_empty(self, claimed: int) -> bool:
        if not self.config.stop_when_empty or claimed or self._held or self._at_max_jobs():
            return False
        if self._db.in_trouble:  # a failed claim proves nothing about the queue
            return False
        self._dry.clear()  # confirm with a fresh claim: nothing claimable *now*
        return self._claim_round() == 0 and not self._held

    def _claim_coming(self) -> bool:
        """Will a claim be due soon (a queue not dry, no limit reached, not stopping)?
        Then finished jobs wait for it, up to ``ACK_DELAY_S``, instead of a lone ack."""
        if self._stop_reason or self._stop_requests or self._at_max_jobs():
            return False
        now = self._clock()
        return any(self._dry.get(q, 0) <= now for q in self._caps)

    def _at_max_jobs(self) -> bool:
        return self.config.max_jobs is not None and self.stats.claimed >= self.config.max_jobs

    # -- waiting and outcomes -----------------------------------------------------

    def _wait(self, until_timer: float) -> None:
        """Block until an outcome, a wake-up or the next timer, whichever is first."""
        if not self._should_block():
            return
        now = self._clock()
        next_dry = min(self._dry.values(), default=now + self.config.sleep)
        timeout = min(until_timer, next_dry - now, 60.0)
        if self._held.running() or self._buffered():
            timeout = min(timeout, 0.1)  # timeouts and stalls are watched
        if self._stop_deadline is not None:
            timeout = min(timeout, self._stop_deadline - now)
        if self._to_ack:
            timeout = min(timeout, ACK_DELAY_S)
        self._wait_for_outcome(timeout)

    def _wait_for_outcome(self, timeout: float) -> None:
        try:
            item = self._results.get(timeout=max(timeout, 0.0))
        except Empty:
            return
        self._handle(item)

    def _should_block(self) -> bool:
        if self._stop_reason or self._stop_requests:
            return bool(self._held)
        if not self._held and (self.config.stop_when_empty or self._at_max_jobs()):
            return False
        if self._at_max_jobs():
            return True
        now = self._clock()  # no claim due now (else pending acks ride along with it)
        return not any(self._has_room(q, cap, now) for q, cap in self._caps.items())

    def _collect(self) -> None:
        get = self._results.get_nowait
        while True:
            try:
                item = get()
            except Empty:
                break
            self._handle(item)
        self._free_slots()
        if self._to_ack and (
            not self._claim_coming() or self._clock() - self._ack_since >= ACK_DELAY_S
        ):
            self._flush_acks()

    def _handle(self, item: Any) -> None:
        if item is WAKE:
            self._dry.clear()
            return
        outcome: Outcome = item
        job = outcome.job
        self._gate.full.discard(job.queue)
        if outcome.ran_s is not None:
            self._prefetch[job.queue].observe(outcome.ran_s)
        if self._held.reported(job):  # else settled at its timeout already
            self._forget(job)
            self._settle(outcome)

    def _settle(self, outcome: Outcome) -> None:
        """The policy's decision (``outbox.queue.policy``), then its write; acks wait to
        ride along with the next claim."""
        job = outcome.job
        cancelled = self._pools is not None and self._pools.cancelled(job)
        decision = self._db.decide(outcome, cancelled=cancelled)
        self.hooks.job_settled(job, decision.action, decision.delay_ms, decision.error)
        if decision.action is not Action.ACK:
            self._db.apply(outcome, decision)
        elif outcome.kind is Kind.ACKED:  # in the handler's own commit
            self.stats.succeeded += 1
            self._db.tally.add(SUCCEEDED, (job,))
        else:
            if not self._to_ack:
                self._ack_since = self._clock()
            self._to_ack.append(job)

    def _release_if_paused(self, queue: str) -> None:
        """A claim found nothing while jobs wait unstarted in this worker's buffer: if
        the queue is paused, hand them back (attempt refunded) instead of running them.
        At most once per poll interval per queue (the queue is dry until then)."""
        pools = self._start_pools()
        if not pools.waiting(queue) or not self._db.is_paused(queue):
            return
        waiting = pools.take_waiting(queue)
        if waiting:
            self._log.info("worker.queue_paused", queue=queue, returned=len(waiting))
            self._release_unspent(waiting)

    def _heartbeat(self) -> None:
        """Renew every lease and limit slot held; learn which held jobs an operator cancelled."""
        cancelled = self._db.heartbeat([*self._held, *self._to_ack])
        if self._gate.slots:  # a held limit slot lives as long as its job's lease
            self._db.renew_slots(self._gate.held())
        if cancelled and self._pools is not None:
            self._pools.cancel(cancelled)

    def _forget(self, job: ClaimedJob) -> None:
        self._held.forget(job)
        if self._gate.slots:
            self._gate.settled(job)

    def _flush_acks(self) -> None:
        if not self._to_ack:
            return
        jobs, self._to_ack = self._to_ack, []
        self._db.ack(jobs)

    def _flush_tally(self, now: float, *, due: bool = False) -> None:
        if due or now >= self._tally_due:
            self._db.flush_tally()
            self._tally_due = now + FLUSH_EVERY_S

    def _release_unspent(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            self._forget(job)
        self._db.release_unspent(jobs)

    # -- timeouts and stalls ------------------------------------------------------

    def _check_timeouts(self, now: float) -> None:
        for job, seconds in self._held.overdue(now, self.registry):
            self.stats.timed_out += 1
            self._forget(job)
            exc = JobTimeout(f"the handler ran past its {seconds} s timeout")
            self._settle(Outcome(Kind.FAILED, job, failure_of(exc)))

    def _buffered(self) -> bool:
        """Are sync jobs waiting unstarted in an adaptive queue's buffer?"""
        pools = self._pools
        return pools is not None and any(
            self._prefetch[q].adaptive and pools.waiting(q) for q in self._caps
        )

    def _stalled(self, queue: str, now: float) -> bool:
        """Has every thread of an adaptive sync queue been busy far longer than its usual
        run time? Then nothing more is claimed for it until one is free."""
        prefetch, pools = self._prefetch[queue], self._pools
        if pools is None or not prefetch.adaptive:
            return False
        return pools.stalled_for(queue, now) >= prefetch.stall_after_s()

    def _check_stalls(self, now: float) -> None:
        """A stalled queue hands its unstarted jobs back so that other workers run them."""
        pools = self._start_pools()
        for queue in self._caps:
            if not pools.waiting(queue) or not self._stalled(queue, now):
                continue
            self._prefetch[queue].stalled()
            waiting = pools.take_waiting(queue)
            if waiting:
                self._log.info("worker.prefetch_returned", queue=queue, jobs=len(waiting))
                self._release_unspent(waiting)

    # -- stopping -----------------------------------------------------------------

    def _begin_stop(self, reason: str) -> None:
        """Stop claiming. Jobs held under ``max_jobs`` all run (they are the quota);
        a signal or ``max_time`` hands back the ones not started and starts the grace."""
        if self._stopping.is_set() or (reason == "max_jobs" and self._stop_reason):
            return
        self._log.info("worker.stopping", reason=reason, held=len(self._held))
        self._stop_reason = reason
        if reason != "max_jobs":
            self._stopping.set()
            self._stop_deadline = self._clock() + self.config.grace
            pools = self._start_pools()
            waiting = pools.take_waiting()  # claimed, not started: back, attempt given back
            if waiting:
                self._release_unspent(waiting)
            pools.release_waiting()

    def _stop_step(self, now: float) -> bool:
        """One step of a graceful stop; True once nothing is left running."""
        self._flush_acks()
        self._free_slots()
        if not self._held:
            return True
        if self._stop_deadline is not None and now >= self._stop_deadline:
            self.stats.graceful = False
            self._log.warning("worker.grace_expired", running=len(self._held))
            return True
        return False

    def _shutdown(self, listener: Listener | None) -> None:
        pools, self._pools = self._pools, None
        self._stopping.set()
        self._flush_acks()
        self._free_slots()
        if self._stop_requests >= 2 or not self.stats.graceful:
            self.stats.graceful = False
        if pools is not None:
            pools.close(cancel_running=not self.stats.graceful)
        if listener is not None:
            listener.close()
        self._flush_tally(self._clock(), due=True)
        self._db.close()
        how = "stopped gracefully" if self.stats.graceful else "stopped with jobs unfinished"
        s = self.stats
        self._log.info("worker.stopped", outcome=how, claimed=s.claimed, succeeded=s.succeeded,
                       retried=s.retried, dead=s.dead, released=s.released, lost=s.lost)
