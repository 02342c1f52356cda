"""The worker's dispatcher: one thread's claims, hand-offs, outcomes and settling.

``outbox.queue.worker`` draws the whole (threads, batching, stopping); this is the part
that runs on the dispatcher thread between the loop's timers: it claims for every queue
with room (``prefetch`` says how far ahead, ``gate`` admits limited jobs), hands the
jobs to the handler ``pools``, collects their outcomes, asks the ``policy`` what follows
each and has the ``settle`` module write it; acknowledgements ride along with the
claim when one is due now, wait (at most ``ACK_DELAY_S``) for one while the queue is
draining, and go on their own at once otherwise (``_ack_alone``). It reads time through
the worker's clock only, and knows of stopping only what the worker tells it
(``halting``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.hooks import Hooks
from outbox.ids import is_node_id
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.execute import JobTimeout, Kind, Outcome, failure_of
from outbox.queue.gate import Gate
from outbox.queue.held import Held
from outbox.queue.policy import Action
from outbox.queue.pools import Pools
from outbox.queue.prefetch import Prefetch
from outbox.queue.registry import Registry
from outbox.queue.settle import Settler
from outbox.queue.throughput import FLUSH_EVERY_S, SUCCEEDED

WAKE = object()
ACK_DELAY_S = 0.05
# Read once, here: ``_settle`` compares every job's decision with them, and on Python
# 3.11 each read of an enum member calls ``EnumType.__getattr__`` (~70 ns).
_ACTION_ACK, _KIND_ACKED = Action.ACK, Kind.ACKED


class Dispatcher:
    def __init__(
        self,
        database: Database,
        registry: Registry,
        config: WorkerConfig,
        worker_id: str,
        *,
        hooks: Hooks,
        clock: Callable[[], float],
        stats: WorkerStats,
        log: Any,
        halting: Callable[[], bool],
        max_jobs_reached: Callable[[], None],
    ) -> None:
        self.database, self.registry, self.config = database, registry, config
        self.worker_id, self.hooks, self.stats, self._log = worker_id, hooks, stats, log
        self._clock = clock
        self.halting = halting  # a stop was asked or begun: claim nothing more
        self.max_jobs_reached = max_jobs_reached
        self._caps = config.caps()
        self._prefetch = {q: Prefetch(cap, config.prefetch) for q, cap in self._caps.items()}
        self.results: SimpleQueue[Any] = SimpleQueue()
        self.stopping = threading.Event()  # handlers start nothing more
        # Set while the last claim round found nothing to claim (for monitoring and tests).
        self.idle = threading.Event()
        self.pools: Pools | None = None
        self.held = Held(self._caps, clock)
        self.to_ack: list[ClaimedJob] = []
        self._ack_since = 0.0
        self.dry: dict[str, float] = {}  # per queue: claim again at (by the clock)
        self.stop_deadline: float | None = None
        self.tally_due = 0.0  # when the chart's counts are next written (throughput.py)
        self._gate = Gate(registry, config.queue_limits)
        self._gating = self._gate.active  # False: claimed jobs never see the gate
        lease_ms = round(config.lease * 1000)
        self.db = Settler(database, registry, worker_id, lease_ms, stats, log,
                          min(config.sleep, 1.0),
                          unknown_delay_ms=round(config.unknown_job_delay * 1000))

    def start_pools(self) -> Pools:
        if self.pools is None:
            self.pools = Pools(
                self.registry, self.worker_id, self.database, self.hooks, self._caps,
                self.results, self.stopping, self.held.began, self._clock,
            )
        return self.pools

    def claim_round(self) -> int:
        """Claim for every queue that has room; hand the jobs to their runners."""
        claimed = 0
        now = self._clock()
        for queue, cap in self._caps.items():
            while self._has_room(queue, cap, now):
                prefetch = self._prefetch[queue].value
                room = cap + prefetch - self.held.count(queue)
                limit = self._within_max_jobs(min(prefetch, room))
                if queue in self._gate.gated:  # claim no more limited jobs than can start
                    limit = min(limit, cap - self.held.count(queue))
                if limit <= 0:
                    break
                jobs = self._claim(queue, limit)
                if not jobs and self.db.in_trouble:  # failed, paused on (settle): claim
                    break  # again next round, not after the poll interval
                claimed += len(jobs)
                got = len(jobs)
                if self._gating:
                    jobs = self._through_gate(queue, jobs)
                self._dispatch(queue, jobs)
                if got < limit:
                    self.dry[queue] = min(now + self.config.sleep, self._gate.next_due(queue, now))
                    if not got:
                        self._release_if_paused(queue)
                    break
        (self.idle.set if not claimed and not self.held else self.idle.clear)()
        if self.to_ack and self._clock() - self._ack_since >= ACK_DELAY_S:
            self.flush_acks()  # due, and no claim carried them (a limit left no room)
        return claimed

    def _has_room(self, queue: str, cap: int, now: float) -> bool:
        """Claim for ``queue`` now? Once half the prefetch is free: big enough batches
        to keep round trips few, early enough that the handlers never wait on one."""
        prefetch = self._prefetch[queue].value
        free = cap + prefetch - self.held.count(queue)
        return (
            free >= max(1, prefetch // 2)
            and self.dry.get(queue, 0) <= now
            and queue not in self._gate.full
            and not self._stalled(queue, now)
        )

    def _within_max_jobs(self, limit: int) -> int:
        if self.config.max_jobs is None:
            return limit
        remaining = self.config.max_jobs - self.stats.claimed
        if remaining <= 0:
            self.max_jobs_reached()
        return min(limit, remaining)

    def _claim(self, queue: str, limit: int) -> list[ClaimedJob]:
        """Claim, carrying the pending acknowledgements along (one round trip). If the
        round trip fails, those acknowledgements wait for the next one: the fence
        (id, attempt, holder) makes a second try safe even if the first landed."""
        done, self.to_ack = self.to_ack, []
        succeeded = self.stats.succeeded
        jobs = self.db.claim(queue, limit, done)
        if done and not jobs and self.db.in_trouble and self.stats.succeeded == succeeded:
            self.to_ack = done + self.to_ack
        self.held.add(queue, jobs)
        return jobs

    def _through_gate(self, queue: str, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """Limited jobs start only if admitted (``outbox.queue.gate``), at most as many
        as this queue had free threads before the claim; the others are back in the
        queue, and a job whose key cannot be computed is dead-lettered."""
        free = self._caps[queue] - (self.held.count(queue) - len(jobs))
        passed = self._gate.through(queue, jobs, free, self._clock(), self.db)
        for kf in passed.bad:
            self._forget(kf.job)
            self._settle(Outcome(Kind.PERMANENT, kf.job, kf.failure))
        for job in passed.back:
            self._forget(job)
        self.stats.claimed -= passed.deferred
        self.stats.deferred += passed.deferred
        return passed.start

    def free_slots(self) -> None:
        """Free the slots of jobs that settled; a job waiting on one may now be ours."""
        slots = self._gate.take_to_free()
        if slots:
            self.db.free_slots(slots)
            for s in slots:
                self.dry.pop(s.job.queue, None)

    def _dispatch(self, queue: str, jobs: list[ClaimedJob]) -> None:
        unknown = self.start_pools().dispatch(queue, jobs)
        if unknown:
            for job in unknown:
                self._forget(job)
            self.db.release_unknown(unknown)

    def _claim_coming(self) -> bool:
        """Will a claim be due soon: a queue draining (not dry), no limit reached, not
        stopping? Then finished jobs wait for it, up to ``ACK_DELAY_S``, instead of a
        lone ack each: while a backlog drains, the next claim comes once half the
        prefetch is free, and one round trip carries both.

        A dry queue expects no claim, even on a worker that LISTENs: holding acks for
        the next relay batch's NOTIFY made that claim carry them (a claim with 51-200
        acks took 25 ms at the median, against 6-8 ms), and the pipeline's p99 rose
        with it (docs/incoming/tail.md has the A/B)."""
        if self.halting() or self.at_max_jobs():
            return False
        now = self._clock()
        return any(self.dry.get(q, 0) <= now for q in self._caps)

    def at_max_jobs(self) -> bool:
        return self.config.max_jobs is not None and self.stats.claimed >= self.config.max_jobs

    def wait(self, until_timer: float) -> None:
        """Block until an outcome, a wake-up or the next timer, whichever is first."""
        if not self._should_block():
            return
        now = self._clock()
        next_dry = min(self.dry.values(), default=now + self.config.sleep)
        timeout = min(until_timer, next_dry - now, 60.0)
        if self.held.running() or self._buffered():
            timeout = min(timeout, 0.1)  # timeouts and stalls are watched
        if self.stop_deadline is not None:
            timeout = min(timeout, self.stop_deadline - now)
        if self.to_ack:
            timeout = min(timeout, ACK_DELAY_S)
        self.wait_for_outcome(timeout)

    def wait_for_outcome(self, timeout: float) -> None:
        try:
            item = self.results.get(timeout=max(timeout, 0.0))
        except Empty:
            return
        self._handle(item)

    def _should_block(self) -> bool:
        if self.halting():
            return bool(self.held)
        if not self.held and (self.config.stop_when_empty or self.at_max_jobs()):
            return False
        if self.at_max_jobs():
            return True
        return not self._room_now()  # no claim due now (else pending acks ride along with it)

    def _room_now(self) -> bool:
        now = self._clock()
        return any(self._has_room(q, cap, now) for q, cap in self._caps.items())

    def _claim_due(self) -> bool:
        """Does the loop's next step claim (a queue with room and not dry, not stopping)?"""
        return not (self.halting() or self.at_max_jobs()) and self._room_now()

    def collect(self) -> None:
        get = self.results.get_nowait
        while True:
            try:
                item = get()
            except Empty:
                break
            self._handle(item)
        self.free_slots()
        if self.to_ack and self._ack_alone():
            self.flush_acks()

    def _ack_alone(self) -> bool:
        """Send the pending acks on their own now? Not while a claim is due: a wake-up
        (or a freed thread) makes the loop claim next, and the acks ride along with that
        claim however long they waited; sent alone first, they would hold the connection
        for a round trip just when the relay's batch is there to be claimed. Otherwise,
        when no claim is coming (``_claim_coming``), or after ``ACK_DELAY_S``."""
        if self._claim_due():
            return False
        return not self._claim_coming() or self._clock() - self._ack_since >= ACK_DELAY_S

    def _handle(self, item: Any) -> None:
        if item is WAKE:
            self.dry.clear()
            return
        outcome: Outcome = item
        job = outcome.job
        self._gate.full.discard(job.queue)
        if outcome.ran_s is not None:
            self._prefetch[job.queue].observe(outcome.ran_s)
        if self.held.reported(job):  # else settled at its timeout already
            self._forget(job)
            self._settle(outcome)

    def _settle(self, outcome: Outcome) -> None:
        """The policy's decision (``outbox.queue.policy``), then its write; acks wait to
        ride along with the next claim."""
        job = outcome.job
        cancelled = self.pools is not None and self.pools.cancelled(job)
        decision = self.db.decide(outcome, cancelled=cancelled)
        self.hooks.job_settled(job, decision.action, decision.delay_ms, decision.error)
        if is_node_id(job.message_id):  # its ack or dead letter may make dependents due:
            self.dry.clear()  # claim at once (the ack rides along) instead of after --sleep
        if decision.action is not _ACTION_ACK:
            self.db.apply(outcome, decision)
        elif outcome.kind is _KIND_ACKED:  # in the handler's own commit
            self.stats.succeeded += 1
            self.db.tally.add(SUCCEEDED, (job,))
        else:
            if not self.to_ack:
                self._ack_since = self._clock()
            self.to_ack.append(job)
        if job.ordering_key is not None:  # its key's next job may be due now: claim it
            self.dry.pop(job.queue, None)  # at once (the ack rides along and promotes it)

    def _release_if_paused(self, queue: str) -> None:
        """A claim found nothing while jobs wait unstarted in this worker's buffer: if
        the queue is paused, hand them back (attempt refunded) instead of running them.
        At most once per poll interval per queue (the queue is dry until then)."""
        pools = self.start_pools()
        if not pools.waiting(queue) or not self.db.is_paused(queue):
            return
        waiting = pools.take_waiting(queue)
        if waiting:
            self._log.info("worker.queue_paused", queue=queue, returned=len(waiting))
            self.release_unspent(waiting)

    def heartbeat(self) -> None:
        """Renew every lease and limit slot held; learn which held jobs an operator cancelled."""
        cancelled = self.db.heartbeat([*self.held, *self.to_ack])
        if self._gate.slots:  # a held limit slot lives as long as its job's lease
            self.db.renew_slots(self._gate.held())
        if cancelled and self.pools is not None:
            self.pools.cancel(cancelled)

    def _forget(self, job: ClaimedJob) -> None:
        self.held.forget(job)
        if self._gate.slots:
            self._gate.settled(job)

    def flush_acks(self) -> None:
        if not self.to_ack:
            return
        jobs, self.to_ack = self.to_ack, []
        self.db.ack(jobs)

    def flush_tally(self, now: float, *, due: bool = False) -> None:
        if due or now >= self.tally_due:
            self.db.flush_tally()
            self.tally_due = now + FLUSH_EVERY_S

    def give_back_running(self) -> None:
        """The grace ran out: what finished meanwhile is settled, the jobs still running
        go back to the queue at once (``Settler.give_back``); their handlers' outcomes,
        if they come, find nothing held."""
        self.collect()
        self.flush_acks()
        jobs = list(self.held)
        for job in jobs:
            self._forget(job)
        self.db.give_back(jobs)

    def release_unspent(self, jobs: list[ClaimedJob]) -> None:
        for job in jobs:
            self._forget(job)
        self.db.release_unspent(jobs)

    def check_timeouts(self, now: float) -> None:
        for job, seconds in self.held.overdue(now, self.registry):
            self.stats.timed_out += 1
            self._forget(job)
            exc = JobTimeout(f"the handler ran past its {seconds} s timeout")
            self._settle(Outcome(Kind.FAILED, job, failure_of(exc)))

    def _buffered(self) -> bool:
        """Are sync jobs waiting unstarted in an adaptive queue's buffer?"""
        pools = self.pools
        return pools is not None and any(
            self._prefetch[q].adaptive and pools.waiting(q) for q in self._caps
        )

    def _stalled(self, queue: str, now: float) -> bool:
        """Has every thread of an adaptive sync queue been busy far longer than its usual
        run time? Then nothing more is claimed for it until one is free."""
        prefetch, pools = self._prefetch[queue], self.pools
        if pools is None or not prefetch.adaptive:
            return False
        return pools.stalled_for(queue, now) >= prefetch.stall_after_s()

    def check_stalls(self, now: float) -> None:
        """A stalled queue hands its unstarted jobs back so that other workers run them."""
        pools = self.start_pools()
        for queue in self._caps:
            if not pools.waiting(queue) or not self._stalled(queue, now):
                continue
            self._prefetch[queue].stalled()
            waiting = pools.take_waiting(queue)
            if waiting:
                self._log.info("worker.prefetch_returned", queue=queue, jobs=len(waiting))
                self.release_unspent(waiting)
