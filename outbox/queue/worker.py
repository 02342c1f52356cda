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
calling it again changes nothing. Jobs still running when the grace runs out go back
to the queue at once, their attempt counted (last error ``WorkerStopped``; a dead letter
after the last attempt), and the stop is not graceful (the CLI exits 1). ``stop_now()``
(a second signal) returns at once; leases of jobs still running then expire and the
reaper returns them to the queue.

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

The parts, each in its module: ``dispatch`` (the dispatcher thread's claims and
outcomes), ``held`` (what this worker holds), ``pools`` (the handlers' threads and
loop), ``gate`` (global limits), ``policy`` (what follows an attempt), ``settle`` (the
writes), ``prefetch`` (how far to claim ahead). This module keeps the loop, stepping
and stopping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.driver import JOBS_CHANNEL
from outbox.db.listen import Listener
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.queue import joblog, signals
from outbox.queue.config import WorkerConfig, WorkerStats, new_worker_id
from outbox.queue.dispatch import WAKE, Dispatcher
from outbox.queue.registry import Registry
from outbox.queue.settle import UNKNOWN_JOB
from outbox.queue.throughput import FLUSH_EVERY_S

__all__ = ["UNKNOWN_JOB", "Worker", "WorkerConfig", "WorkerStats"]

log = get_logger("outbox.worker")

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
        self._stop_requests = 0  # 1: stop gracefully, 2: stop now
        self._stop_reason: str | None = None
        self.listener: Listener | None = None
        self._log = log.bind(worker_id=self.worker_id)
        self._d = Dispatcher(
            database, registry, self.config, self.worker_id, hooks=hooks, clock=clock,
            stats=self.stats, log=self._log, halting=self._halting,
            max_jobs_reached=lambda: self._begin_stop("max_jobs"),
        )
        self._db = self._d.db  # the worker's queue writes (outbox.queue.settle)
        self._results, self._stopping = self._d.results, self._d.stopping
        # Set while the last claim round found nothing to claim (for monitoring and tests).
        self.idle = self._d.idle

    def _halting(self) -> bool:
        return bool(self._stop_reason or self._stop_requests)

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
        self._d.start_pools()
        listener = self.listener = self._start_listener()
        prefetch = "adaptive" if self.config.prefetch is None else self.config.prefetch
        self._log.info(
            "worker.started",
            queues=self.config.caps(),
            prefetch=prefetch,
            **joblog.encryption_fields(),
        )
        try:
            self._loop()
        finally:
            self._shutdown(listener)
        self._raise_fatal()
        return self.stats

    def run_once(self, timeout: float = STEP_TIMEOUT_S) -> int:
        """One round: reap, claim for every queue with room, run what was claimed and
        settle every outcome (acknowledge, retry, dead-letter). Returns how many jobs
        it claimed. Waits up to ``timeout`` seconds (by the worker's clock: a fake one
        must be advanced) for the round's handlers; jobs still running then stay held
        and settle in a later round. No LISTEN, no sleeping: the caller decides when the
        next round happens; ``close()`` ends the threads.
        """
        self._d.start_pools()
        self._d.db.reap()
        self._d.dry.clear()
        claimed = self._d.claim_round()
        now = self._clock()
        deadline, next_beat = now + timeout, now + self.config.lease / 3
        while self._d.held and now < deadline:
            self._d.check_timeouts(now)
            if now >= next_beat:
                self._d.heartbeat()
                next_beat = now + self.config.lease / 3
            self._d.wait_for_outcome(min(deadline - now, 0.1))
            self._d.collect()
            now = self._clock()
        self._d.flush_acks()
        self._d.flush_tally(self._clock())
        self._raise_fatal()
        return claimed

    def _raise_fatal(self) -> None:
        """A database that refuses to write (``ReadOnlyDatabase``) ends the worker: no
        retry fixes it, and a ``stop_when_empty`` worker would otherwise never end."""
        if self._d.db.fatal is not None:
            raise self._d.db.fatal

    def close(self) -> None:
        """End the handler threads and the connection of a worker driven by ``run_once``
        (``run`` does this itself). Jobs still held come back through the reaper."""
        if self._d.pools is not None:
            self._shutdown(None)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        self._d.tally_due = began + FLUSH_EVERY_S
        while self._stop_requests < 2 and self._d.db.fatal is None:
            now = self._clock()
            if self._stop_requests:
                self._begin_stop("signal")
            if cfg.max_time is not None and now - began >= cfg.max_time:
                self._begin_stop("max_time")
            if now >= next_reap:
                self._d.db.reap()
                next_reap = now + reap_every
            if now >= next_beat:
                self._d.heartbeat()
                self.hooks.worker_tick(len(self._d.held) + len(self._d.to_ack))
                next_beat = now + cfg.lease / 3
            self._d.flush_tally(now)
            self._d.check_timeouts(now)
            self._d.check_stalls(now)
            if self._stop_reason:
                if self._stop_step(now):
                    return
            elif self._should_exit_empty(self._d.claim_round()):
                return
            self._d.db.start_upkeep()  # after the claim: a woken worker claims first
            self._d.wait(min(next_beat, next_reap) - self._clock())
            self._d.collect()

    def _should_exit_empty(self, claimed: int) -> bool:
        if not self.config.stop_when_empty or claimed or self._d.held or self._d.at_max_jobs():
            return False
        if self._d.db.in_trouble:  # a failed claim proves nothing about the queue
            return False
        self._d.dry.clear()  # confirm with a fresh claim: nothing claimable *now*
        return self._d.claim_round() == 0 and not self._d.held

    # -- stopping -----------------------------------------------------------------

    def _begin_stop(self, reason: str) -> None:
        """Stop claiming. Jobs held under ``max_jobs`` all run (they are the quota);
        a signal or ``max_time`` hands back the ones not started and starts the grace."""
        if self._stopping.is_set() or (reason == "max_jobs" and self._stop_reason):
            return
        self._log.info("worker.stopping", reason=reason, held=len(self._d.held))
        self._stop_reason = reason
        if reason != "max_jobs":
            self._stopping.set()
            self._d.stop_deadline = self._clock() + self.config.grace
            pools = self._d.start_pools()
            waiting = pools.take_waiting()  # claimed, not started: back, attempt given back
            if waiting:
                self._d.release_unspent(waiting)
            pools.release_waiting()

    def _stop_step(self, now: float) -> bool:
        """One step of a graceful stop; True once nothing is left running."""
        self._d.flush_acks()
        self._d.free_slots()
        if not self._d.held:
            return True
        if self._d.stop_deadline is not None and now >= self._d.stop_deadline:
            self.stats.graceful = False
            self._log.warning("worker.grace_expired", running=len(self._d.held))
            self._d.give_back_running()  # not left to their leases: the worker is going
            return True
        return False

    def _shutdown(self, listener: Listener | None) -> None:
        pools, self._d.pools = self._d.pools, None
        self._stopping.set()
        self._d.flush_acks()
        self._d.free_slots()
        if self._stop_requests >= 2 or (self._d.db.fatal is not None and self._d.held):
            self.stats.graceful = False  # no waiting for jobs that could not be settled
        if pools is not None:
            pools.close(cancel_running=not self.stats.graceful)
        if listener is not None:
            listener.close()
        self._d.flush_tally(self._clock(), due=True)
        self._d.db.stop_upkeep()
        self._d.db.close()
        joblog.worker_stopped(self._log, self.stats)
