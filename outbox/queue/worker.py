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
ends the handler threads. ``clock`` (monotonic seconds) is injected for the schedule of
heartbeats, reaps, timeouts and limits.
"""

from __future__ import annotations

import heapq
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Empty, SimpleQueue
from typing import Any

from outbox import metrics
from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.driver import JOBS_CHANNEL
from outbox.db.listen import Listener
from outbox.db.rows import ClaimedJob
from outbox.log import get_logger
from outbox.queue.config import WorkerConfig, WorkerStats, new_worker_id
from outbox.queue.execute import AsyncPool, JobTimeout, Kind, Outcome, Runner, SyncPool, failure_of
from outbox.queue.gate import Gate
from outbox.queue.prefetch import Prefetch
from outbox.queue.registry import Registry
from outbox.queue.settle import UNKNOWN_JOB, Settler
from outbox.queue.throughput import FLUSH_EVERY_S, SUCCEEDED

__all__ = ["UNKNOWN_JOB", "Worker", "WorkerConfig", "WorkerStats"]

log = get_logger("outbox.worker")

WAKE = object()
ACK_DELAY_S = 0.05
STEP_TIMEOUT_S = 30.0
# A job sent back over a limit is claimed this long after it is due, so that the
# database's clock has passed its time too.
DUE_SLACK_S = 0.005


class Worker:
    """Runs jobs of ``registry`` from ``config.queues`` until stopped or a limit is hit."""

    def __init__(
        self,
        database: Database,
        registry: Registry,
        config: WorkerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.registry = registry
        self.config = config or WorkerConfig()
        self.config.check()
        self._clock = clock
        self.worker_id = new_worker_id()
        self.stats = WorkerStats()
        self._caps = self.config.caps()
        self._prefetch = {q: Prefetch(cap, self.config.prefetch) for q, cap in self._caps.items()}
        self._lease_ms = round(self.config.lease * 1000)
        self._results: SimpleQueue[Any] = SimpleQueue()
        self._stopping = threading.Event()
        self._stop_requests = 0  # 1: stop gracefully, 2: stop now
        # Set while the last claim round found nothing to claim (for monitoring and tests).
        self.idle = threading.Event()
        self._started_pools = False
        self.listener: Listener | None = None
        self._stop_reason: str | None = None
        self._sync_pools: dict[str, SyncPool] = {}
        self._async_pool: AsyncPool | None = None
        self._runner: Runner | None = None
        self._ack_since = 0.0
        self._held: dict[int, ClaimedJob] = {}
        self._held_per_queue = dict.fromkeys(self._caps, 0)
        self._started: dict[int, float] = {}
        self._abandoned: set[int] = set()
        self._to_ack: list[ClaimedJob] = []
        self._dry: dict[str, float] = {}
        self._stop_deadline: float | None = None
        self._tally_due = 0.0  # when the chart's counts are next written (throughput.py)
        self._log = log.bind(worker_id=self.worker_id)
        self._gate = Gate(registry, self.config.queue_limits)
        self._gating = self._gate.active  # False: claimed jobs never see the gate
        self._gate_full: set[str] = set()  # limited jobs handed back: no free thread
        # Queues whose last claim had limited jobs within their limits: claim no more
        # than there are free threads. (Cleared when every limited job was deferred:
        # then big batches reserve a backlog's starts quickly.)
        self._gated: set[str] = set()
        # per queue, when the jobs sent back over a limit are due again (heaps)
        self._limit_due: dict[str, list[float]] = {}
        self._db = Settler(
            database,
            registry,
            self.worker_id,
            self._lease_ms,
            self.stats,
            self._log,
            min(self.config.sleep, 1.0),
            unknown_delay_ms=round(self.config.unknown_job_delay * 1000),
        )

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

    @contextmanager
    def signals_handled(self) -> Iterator[None]:
        """SIGTERM/SIGINT: first stops gracefully, second at once. Main thread only."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, _frame: Any) -> None:
            if self._stop_requests:
                self.stop_now()
            else:
                self.stop()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

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
        it claimed. Waits up to ``timeout`` seconds for the round's handlers; jobs still
        running then stay held and settle in a later round. No LISTEN, no sleeping:
        the caller decides when the next round happens; ``close()`` ends the threads.
        """
        self._start_pools()
        self._db.reap()
        self._dry.clear()
        claimed = self._claim_round()
        # Real time, not the injected clock: this waits on threads.
        deadline = time.monotonic() + timeout
        next_beat = time.monotonic() + self.config.lease / 3
        while self._held and time.monotonic() < deadline:
            self._check_timeouts(self._clock())
            if time.monotonic() >= next_beat:
                self._heartbeat()
                next_beat = time.monotonic() + self.config.lease / 3
            self._wait_for_outcome(min(deadline - time.monotonic(), 0.1))
            self._collect()
        self._flush_acks()
        self._flush_tally(self._clock())
        return claimed

    def close(self) -> None:
        """End the handler threads and the connection of a worker driven by ``run_once``
        (``run`` does this itself). Jobs still held come back through the reaper."""
        if self._started_pools:
            self._shutdown(None)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_pools(self) -> None:
        if self._started_pools:
            return
        self._started_pools = True
        runner = self._runner = Runner(self.registry, self.worker_id, self.database)
        self._sync_pools = {
            q: SyncPool(q, n, runner, self._results, self._stopping, self._mark_started)
            for q, n in self._caps.items()
        }
        if self.registry.has_async:
            self._async_pool = AsyncPool(self._caps, runner, self._results, self._stopping)

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
                metrics.worker_tick(len(self._held) + len(self._to_ack))
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

    def _claim_round(self) -> int:
        """Claim for every queue that has room; hand the jobs to their runners."""
        claimed = 0
        now = self._clock()
        for queue, cap in self._caps.items():
            while self._has_room(queue, cap, now):
                prefetch = self._prefetch[queue].value
                room = cap + prefetch - self._held_per_queue[queue]
                limit = self._within_max_jobs(min(prefetch, room))
                if queue in self._gated:  # claim no more limited jobs than can start
                    limit = min(limit, cap - self._held_per_queue[queue])
                if limit <= 0:
                    break
                jobs = self._claim(queue, limit)
                claimed += len(jobs)
                got = len(jobs)
                if self._gating:
                    jobs = self._through_gate(queue, jobs)
                self._dispatch(jobs, self._sync_pools[queue])
                if got < limit:
                    self._dry[queue] = min(now + self.config.sleep, self._next_due(queue, now))
                    if not got:
                        self._release_if_paused(queue)
                    break
        (self.idle.set if not claimed and not self._held else self.idle.clear)()
        return claimed

    def _has_room(self, queue: str, cap: int, now: float) -> bool:
        """Claim for ``queue`` now? Once half the prefetch is free: big enough batches
        to keep round trips few, early enough that the handlers never wait on one."""
        prefetch = self._prefetch[queue].value
        free = cap + prefetch - self._held_per_queue[queue]
        return (
            free >= max(1, prefetch // 2)
            and self._dry.get(queue, 0) <= now
            and queue not in self._gate_full
            and not self._stalled(queue)
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
        for job in jobs:
            self._held[job.id] = job
        self._held_per_queue[queue] += len(jobs)
        return jobs

    def _through_gate(self, queue: str, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """Limited jobs start only if admitted (``outbox.queue.gate``), and at most as
        many as this queue has free threads; the others are back in the queue."""
        gate = self._gate
        limited = [j for j in jobs if gate.applies(j)]
        if not limited:
            self._gated.discard(queue)
            return jobs
        rest = [j for j in jobs if not gate.applies(j)]
        asks, bad = gate.asks(limited)
        for kf in bad:
            self._forget(kf.job)
            self._db.fail(kf.job, kf.failure, permanent=True)
        free = self._caps[queue] - (self._held_per_queue[queue] - len(jobs) + len(bad))
        now = self._clock()  # before: a wait counts from the database's reading
        verdicts = self._db.admit(asks, max(free, 0)) if asks else []
        decided = {v.job.id for v in verdicts}
        for ask in asks:
            if ask.job.id not in decided:  # the database failed; handed back
                self._forget(ask.job)
        by_id = {a.job.id: a for a in asks}
        if any(v.wait_ms == 0 for v in verdicts):
            self._gated.add(queue)
        else:
            self._gated.discard(queue)
        admitted = []
        for v in verdicts:
            if v.admitted:
                gate.hold(by_id[v.job.id])
                admitted.append(v.job)
                continue
            self._forget(v.job)
            self.stats.claimed -= 1
            self.stats.deferred += 1
            if v.wait_ms:
                due = now + v.wait_ms / 1000 + DUE_SLACK_S
                heapq.heappush(self._limit_due.setdefault(queue, []), due)
            else:
                self._gate_full.add(queue)
        return admitted + rest

    def _next_due(self, queue: str, now: float) -> float:
        """When the next job this worker sent back over a limit is due (else never)."""
        due = self._limit_due.get(queue)
        while due and due[0] <= now:
            heapq.heappop(due)
        return due[0] if due else float("inf")

    def _free_slots(self) -> None:
        """Free the slots of jobs that settled; a job waiting on one may now be ours."""
        slots = self._gate.take_to_free()
        if slots:
            self._db.free_slots(slots)
            for s in slots:
                self._dry.pop(s.job.queue, None)

    def _dispatch(self, jobs: list[ClaimedJob], pool: SyncPool) -> None:
        async_pool = self._async_pool
        to_async = []
        unknown = []
        for job in jobs:
            handler = self.registry.get(job.job_name)
            if handler is None:
                unknown.append(job)
            elif handler.is_async and async_pool is not None:
                to_async.append((job, handler))
            else:
                pool.inbox.put((job, handler))
        if to_async and async_pool is not None:
            async_pool.submit(to_async)
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

    def _wait(self, until_timer: float) -> None:
        """Block until an outcome, a wake-up or the next timer, whichever is first."""
        if not self._should_block():
            return
        timeout = min(until_timer, self._next_dry() - self._clock(), 60.0)
        if self._started or self._buffered():
            timeout = min(timeout, 0.1)  # timeouts and stalls are watched
        if self._stop_deadline is not None:
            timeout = min(timeout, self._stop_deadline - self._clock())
        if self._to_ack:
            timeout = min(timeout, ACK_DELAY_S)
        timeout = max(timeout, 0.0)
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
        return not self._claim_due()

    def _claim_due(self) -> bool:
        """Will the next claim round claim? (Then pending acks ride along with it.)"""
        if self._stop_reason or self._stop_requests or self._at_max_jobs():
            return False
        now = self._clock()
        return any(self._has_room(q, cap, now) for q, cap in self._caps.items())

    def _claim_coming(self) -> bool:
        """Will a claim be due soon (a queue not dry, no limit reached, not stopping)?
        Then finished jobs wait for it, up to ``ACK_DELAY_S``, instead of a lone ack."""
        if self._stop_reason or self._stop_requests or self._at_max_jobs():
            return False
        now = self._clock()
        return any(self._dry.get(q, 0) <= now for q in self._caps)

    def _at_max_jobs(self) -> bool:
        return self.config.max_jobs is not None and self.stats.claimed >= self.config.max_jobs

    def _next_dry(self) -> float:
        return min(self._dry.values(), default=self._clock() + self.config.sleep)

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
        metrics.job_finished(outcome, self.registry)
        job = outcome.job
        self._gate_full.discard(job.queue)
        if outcome.ran_s is not None:
            self._prefetch[job.queue].observe(outcome.ran_s)
        self._started.pop(job.id, None)
        if job.id in self._abandoned:
            self._abandoned.discard(job.id)
            return
        self._forget(job)
        if self._runner is not None and job.id in self._runner.cancelled:
            self._runner.cancelled.discard(job.id)
            # Unstarted: back with the flag (the next holder records it); acknowledged in
            # the handler's own commit before the flag was seen: it succeeded.
            if outcome.kind not in (Kind.UNSTARTED, Kind.ACKED):
                self._db.cancel(job)
                return
        if outcome.kind is Kind.DONE:
            if not self._to_ack:
                self._ack_since = self._clock()
            self._to_ack.append(job)
            return
        if outcome.kind is Kind.ACKED:
            self.stats.succeeded += 1
            self._db.tally.add(SUCCEEDED, (job,))
        elif outcome.kind is Kind.LOST:
            self._db.unchanged([job], "transactional commit")
        elif outcome.kind is Kind.SNOOZED:
            self._db.snooze(job, outcome.snooze_s)
        elif outcome.kind is Kind.CANCELLED:
            self._db.cancel(job)
        elif outcome.kind is Kind.UNSTARTED:
            self._release_unspent([job])
        else:
            self._fail(job, outcome)

    def _release_if_paused(self, queue: str) -> None:
        """A claim found nothing while jobs wait unstarted in this worker's buffer: if
        the queue is paused, hand them back (attempt refunded) instead of running them.
        At most once per poll interval per queue (the queue is dry until then)."""
        pool = self._sync_pools.get(queue)
        if pool is None or not pool.waiting() or not self._db.is_paused(queue):
            return
        waiting = [job for job, _ in pool.drain()]
        if waiting:
            self._log.info("worker.queue_paused", queue=queue, returned=len(waiting))
            self._release_unspent(waiting)

    def _heartbeat(self) -> None:
        """Renew every lease and limit slot held; learn which held jobs an operator cancelled."""
        cancelled = self._db.heartbeat([*self._held.values(), *self._to_ack])
        if self._gate.slots:  # a held limit slot lives as long as its job's lease
            self._db.renew_slots(self._gate.held())
        runner = self._runner
        if not cancelled or runner is None:
            return
        new = cancelled - runner.cancelled
        runner.cancelled.update(new)
        if new and self._async_pool is not None:
            self._async_pool.cancel_jobs(new)

    def _forget(self, job: ClaimedJob) -> None:
        if self._held.pop(job.id, None) is not None:
            self._held_per_queue[job.queue] -= 1
        if self._gate.slots:
            self._gate.settled(job)

    # -- acknowledgements, failures, releases -------------------------------------

    def _flush_acks(self) -> None:
        if not self._to_ack:
            return
        jobs, self._to_ack = self._to_ack, []
        self._db.ack(jobs)

    def _flush_tally(self, now: float, *, due: bool = False) -> None:
        if due or now >= self._tally_due:
            self._db.flush_tally()
            self._tally_due = now + FLUSH_EVERY_S

    def _fail(self, job: ClaimedJob, outcome: Outcome) -> None:
        failure = outcome.failure or failure_of(RuntimeError("unknown failure"))
        ran_ms = None if outcome.ran_s is None else round(outcome.ran_s * 1000, 2)
        self._db.fail(job, failure, permanent=outcome.kind is Kind.PERMANENT, duration_ms=ran_ms)

    def _release_unspent(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            self._forget(job)
        self._db.release_unspent(jobs)

    # -- leases -------------------------------------------------------------------

    def _mark_started(self, job: ClaimedJob) -> None:
        self._started[job.id] = self._clock()

    def _check_timeouts(self, now: float) -> None:
        for job_id, began in list(self._started.items()):
            job = self._held.get(job_id)
            handler = self.registry.get(job.job_name) if job else None
            if job is None or handler is None or handler.timeout is None:
                continue
            if now - began >= handler.timeout:
                self._started.pop(job_id, None)
                self._abandoned.add(job_id)
                self.stats.timed_out += 1
                self._forget(job)
                exc = JobTimeout(f"the handler ran past its {handler.timeout} s timeout")
                self._fail(job, Outcome(Kind.FAILED, job, failure_of(exc)))

    def _buffered(self) -> bool:
        """Are sync jobs waiting unstarted in an adaptive queue's buffer?"""
        return any(
            self._prefetch[q].adaptive and pool.waiting() for q, pool in self._sync_pools.items()
        )

    def _stalled(self, queue: str) -> bool:
        """Has every thread of an adaptive sync queue been busy far longer than its usual
        run time? Then nothing more is claimed for it until one is free."""
        prefetch, pool = self._prefetch[queue], self._sync_pools.get(queue)
        if pool is None or not prefetch.adaptive:
            return False
        return pool.stalled_for(time.monotonic()) >= prefetch.stall_after_s()

    def _check_stalls(self, now: float) -> None:
        """A stalled queue hands its unstarted jobs back so that other workers run them."""
        for queue, pool in self._sync_pools.items():
            if not pool.waiting() or not self._stalled(queue):
                continue
            self._prefetch[queue].stalled()
            waiting = [job for job, _ in pool.drain()]
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
            self._release_buffered()

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

    def _release_buffered(self) -> None:
        """Jobs claimed but not started go back now, their attempt given back."""
        waiting: list[ClaimedJob] = []
        for pool in self._sync_pools.values():
            waiting.extend(job for job, _ in pool.drain())
        if waiting:
            self._release_unspent(waiting)
        if self._async_pool is not None:
            self._async_pool.release_waiting()

    def _shutdown(self, listener: Listener | None) -> None:
        self._started_pools = False
        self._stopping.set()
        self._flush_acks()
        self._free_slots()
        if self._stop_requests >= 2 or not self.stats.graceful:
            self.stats.graceful = False
            if self._async_pool is not None:
                self._async_pool.cancel_all()
        for pool in self._sync_pools.values():
            pool.close()
        if self._async_pool is not None:
            self._async_pool.close()
        if listener is not None:
            listener.close()
        self._flush_tally(self._clock(), due=True)
        self._db.close()
        how = "stopped gracefully" if self.stats.graceful else "stopped with jobs unfinished"
        self._log.info(
            "worker.stopped",
            outcome=how,
            claimed=self.stats.claimed,
            succeeded=self.stats.succeeded,
            retried=self.stats.retried,
            dead=self.stats.dead,
            released=self.stats.released,
            lost=self.stats.lost,
        )
