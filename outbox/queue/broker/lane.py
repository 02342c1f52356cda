"""One queue of a broker worker: its fetched deliveries, running jobs and their leases.

A ``BrokerLane`` is what a lane does whatever the broker; a transport's lane
(``outbox.jetstream.lane``, ``outbox.queue.redis.lane``) subclasses it and gives the few
methods that speak the protocol (the "transport" section below): fetching, and how a
delivery is decoded, acknowledged, retried, snoozed, dead-lettered, handed back unstarted
and kept leased. A delivery is whatever the transport fetched (a NATS message, a Redis
stream entry): this module never looks inside one.

Everything here runs on the worker's event loop except sync handlers, which run on
``cap`` long-lived threads (``SyncPool``, as on SQL): a sync handler may block, so it
never runs on the loop. The loop owns all the state, so the cap is a counter, not a
semaphore, and a job costs no task of its own unless its handler is async::

    fetched ─► waiting ─► (a slot is free) start ─┬─ sync: the pool's inbox
      (a batch per    │                          └─ async: one task
       loop turn)     └─ stopping, or max_jobs/max_time reached: handed back at once
    outcomes ─► settle (``outbox.queue.policy`` decides, as on SQL): ack / retry after
                the backoff / dead letter / snooze; the slot starts the next

A lane never fetches past what it may start (its window, ``cap + prefetch``, and
``max_jobs``), so a graceful stop hands back only its prefetch.

A sync handler past its ``timeout`` is failed as on SQL (``JobTimeout``, retried or
dead-lettered) and its slot is freed at once; its thread runs the handler to its end
with the result ignored, and the next job waits for a free thread.

The costs are paid per burst, not per job: outcomes of sync handlers come back on one
queue whose first put of a burst wakes the loop (one ``call_soon_threadsafe`` for many
jobs); the transport's writes are queued and sent by one task (``_send``), so a burst
leaves in one socket write; one ticker per queue renews the lease of every delivery the
lane holds, running or waiting for a slot, each lease/3 (without it a fetched job that
waits past the lease would be handed to another worker and run twice).

A lane sees of its worker only the ``LaneContext`` the worker's lanes share.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from queue import Empty, SimpleQueue
from typing import Any, Generic, TypeVar

from outbox.db.rows import ClaimedJob, Failure
from outbox.log import get_logger
from outbox.queue import joblog
from outbox.queue.broker.context import LaneContext
from outbox.queue.execute import JobTimeout, Kind, Outcome, SyncPool, failure_of
from outbox.queue.policy import UNKNOWN_FAILURE, Action, Decision, decide
from outbox.queue.prefetch import Prefetch
from outbox.queue.registry import Handler

log = get_logger("outbox.worker")
Send = Callable[[], Awaitable[None]]
D = TypeVar("D")  # one delivery, as the transport fetched it
LOWEST_BAND = 10  # past the least urgent band (9)


class _Outcomes(SimpleQueue[Any]):
    """Outcomes from the pool's threads: the first put of a burst schedules one drain on
    the loop; the drain disarms before it empties the queue, so no outcome is missed."""

    loop: asyncio.AbstractEventLoop
    drain: Callable[[], None]
    armed = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item)
        if not self.armed:
            self.armed = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the worker exited
                self.loop.call_soon_threadsafe(self.drain)


class BrokerLane(Generic[D]):
    """Runs and settles the jobs of one queue, at most ``cap`` at a time; a transport's
    subclass fetches them (calling ``_wait_for_slot`` for each delivery) and writes what
    follows each.

    Without ``prefetch`` configured, a transport whose class sets ``adaptive`` holds
    ahead what the SQL worker would claim ahead (``outbox.queue.prefetch``: learnt from
    the sync handlers' run times, up to ``MAX_ADAPTIVE`` for quick ones, one a slot for
    slow ones); any other holds one a slot."""

    adaptive = False

    def __init__(self, ctx: LaneContext, queue: str, cap: int, bands: int = 1) -> None:
        self.ctx, self.queue, self.cap, self.bands = ctx, queue, cap, bands
        config = ctx.config
        fixed = config.prefetch
        if fixed is None and not self.adaptive:
            fixed = cap
        self.prefetch = Prefetch(cap, fixed)
        self.window = cap + self.prefetch.value
        self.waiting: deque[D] = deque()
        self.running: dict[int, tuple[D, ClaimedJob]] = {}  # id(job) → its delivery
        self.busy = 0  # slots taken: len(running)
        self.looking = 0  # deliveries the transport still prepares (held, not waiting yet)
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(job) → its sync timeout
        self._abandoned: set[int] = set()  # id(job) of sync jobs failed at their timeout
        self.tasks: set[asyncio.Task[Any]] = set()  # async handlers, dead-lettering
        self._handlers: dict[int, asyncio.Task[Any]] = {}  # id(job) → its async handler
        self.room = asyncio.Event()  # set when a fetch may be due, or stop was asked
        self.idle = asyncio.Event()
        self._out: list[Send] = []
        self._sender: asyncio.Task[None] | None = None
        self._pool: SyncPool | None = None
        self._pool_stopping = threading.Event()
        self._outcomes = _Outcomes()
        self._outcomes.loop = asyncio.get_running_loop()
        self._outcomes.drain = self._drain
        self._closed = False  # fetching is over: whatever still arrives is handed back
        self._releasing: set[asyncio.Task[Any]] = set()  # hand-backs awaited at a stop

    # -- the transport: what a subclass speaks ------------------------------------

    async def run(self) -> None:
        """Fetch until stopped, done, or (``stop_when_empty``) nothing is left; then
        ``_finish`` and ``_close``."""
        raise NotImplementedError

    def _want(self) -> int:
        """How many to ask for now: 0 while a fetch is open (``_asking``), the queue is
        paused or the window is full enough (refill by half windows while every slot has
        work, not per job)."""
        if self._asking() or self.paused():
            return 0
        held = self._held()
        want = min(self.window - held, self._jobs_left())
        if held >= self.cap and want < max(1, self.window // 2):
            return 0
        return max(0, want)

    def _asking(self) -> bool:
        """A fetch is open and may still deliver (no second one meanwhile)."""
        return False

    def _decode(self, d: D) -> ClaimedJob | None:
        """The job ``d`` carries, its attempt counted; None when it is not one of ours
        (the transport has parked it on the dead letters)."""
        raise NotImplementedError

    def _band(self, d: D) -> int:
        """The priority band ``d`` came from (0 most urgent); the lane starts the most
        urgent waiting first."""
        return 0

    def _ack(self, d: D, job: ClaimedJob) -> None:
        """Done: ``d`` leaves the broker."""
        raise NotImplementedError

    def _retry(self, d: D, job: ClaimedJob, delay_ms: int) -> None:
        """Failed with attempts left: ``job`` comes back after ``delay_ms``, counted."""
        raise NotImplementedError

    def _snooze(self, d: D, job: ClaimedJob, n: int, due_ms: int) -> None:
        """Snoozed for the ``n``-th time: ``job`` comes back at ``due_ms``, uncounted."""
        raise NotImplementedError

    def _snoozes(self, d: D) -> int:
        """How often the job of ``d`` was snoozed before."""
        raise NotImplementedError

    async def _dead_letter(self, d: D, job: ClaimedJob, failure: Failure) -> bool:
        """Copy ``job`` to the dead letters, then let ``d`` go; False (and ``d`` left
        alone, back after its lease) when the copy failed: nothing is lost."""
        raise NotImplementedError

    def _hand_back(self, d: D, delay: float | None = None) -> None:
        """``d``'s job did not run: back (after ``delay`` seconds, or at once), its
        attempt not spent."""
        raise NotImplementedError

    async def _extend(self, held: list[D]) -> None:
        """Renew the lease of every delivery in ``held``."""
        raise NotImplementedError

    async def _closing(self) -> None:
        """After the last writes at the lane's end: the transport's own resources."""

    # -- holding ------------------------------------------------------------------

    def paused(self) -> bool:
        return self.queue in self.ctx.paused

    def cancel_job(self, message_id: str) -> None:
        """An operator cancelled ``message_id``: a running job sees ``ctx.cancelled`` (an
        async handler is cancelled) and is dead-lettered as cancelled when it returns; a
        fetched one that has not started is dead-lettered when its turn comes."""
        for key, (_, job) in list(self.running.items()):
            if job.message_id == message_id:
                self.ctx.runner.cancelled.add(job.id)
                task = self._handlers.get(key)
                if task is not None:
                    task.cancel()

    def wake(self) -> None:
        """The queue was paused or resumed: fetch and start again, or stop doing so (the
        sync jobs no thread has taken yet wait again, their leases renewed)."""
        if self.paused():
            self._unqueue()
        self.room.set()
        self._pump()

    def _unqueue(self) -> None:
        """Sync jobs queued in the pool that no thread has taken: back to the front of
        ``waiting`` in their order, as if never started."""
        if self._pool is None:
            return
        taken = self._pool.drain()
        for job, _ in reversed(taken):
            d, _ = self.running.pop(id(job))
            self.ctx.started -= 1
            self.ctx.stats.claimed -= 1
            self._freed()
            self.waiting.appendleft(d)

    def _jobs_left(self) -> int:
        """How many more deliveries this worker may still start (``max_jobs``) beyond the
        ones this lane holds: fetching more would only hand them back at the limit."""
        left = self.ctx.config.max_jobs
        if left is None:
            return self.window
        return left - self.ctx.started - (self._held() - self.busy)

    def _held(self) -> int:
        """Deliveries fetched and not settled: waiting (or being prepared) and running."""
        return len(self.waiting) + self.looking + self.busy

    def _wait_for_slot(self, d: D) -> None:
        """A fetched delivery: it waits for a slot (handed back when fetching is over)."""
        if self._closed:
            self._release(d)
        else:
            self.waiting.append(d)
            self._pump()

    async def _all_settled(self) -> None:
        """Until every delivery held has run and settled (a round's end)."""
        while self.waiting or self.busy or self.tasks or self.looking:
            if self.busy:
                await self.idle.wait()
            elif self.tasks:
                await asyncio.wait(set(self.tasks))
            else:
                await asyncio.sleep(0)

    # -- starting -----------------------------------------------------------------

    def _pump(self) -> None:
        """Start waiting deliveries while slots are free. Sync jobs may also be queued
        behind the busy threads, up to the lane's window, as the SQL worker hands its
        whole claim to the pool's buffer: a thread goes from one job to the next without
        a trip through the loop, and the loop wakes once for a burst of outcomes, not
        for each job (a queue one job deep cost a drain with one slot two thread switches
        a job). Still only ``cap`` threads run them; the ones no thread has taken come
        back to ``waiting`` on a pause (``wake``) and are handed back at a stop
        (``_finish``). An async job waits for a slot (``_start`` puts it back first in
        line)."""
        w = self.ctx
        while self.waiting and self.busy < self.window and not self.paused():
            d = self._most_urgent()
            if self._closed or w.stopping.is_set() or w.done():
                self._release(d)
            else:
                w.started += 1
                if not self._start(d):
                    break

    def _most_urgent(self) -> D:
        """The next waiting delivery to start: the first of the most urgent band held."""
        waiting = self.waiting
        if self.bands == 1:
            return waiting.popleft()
        best, at = LOWEST_BAND, 0
        for i, d in enumerate(waiting):
            band = self._band(d)
            if band < best:
                best, at = band, i
                if band == 0:
                    break
        d = waiting[at]
        del waiting[at]
        return d

    def _start(self, d: D) -> bool:
        w = self.ctx
        job = self._decode(d)
        if job is None:
            return True
        now_ms = w.now_ms()
        if job.available_at > now_ms:  # handed off before it is due
            self._hand_back(d, (job.available_at - now_ms) / 1000)
            return True
        handler = w.registry.get(job.job_name)
        if self.busy >= self.cap and handler is not None and handler.is_async:
            w.started -= 1  # no slot for it: it waits for one, first in line
            self.waiting.appendleft(d)
            return False
        job.priority = self._band(d)
        w.stats.claimed += 1
        limit = w.registry.max_attempts(job.job_name, job.max_attempts)
        if job.message_id in w.cancel_marks:  # cancelled before it ran: never runs
            self._settle(d, Outcome(Kind.CANCELLED, job))
        elif handler is None:
            w.stats.unknown += 1
            failure = Failure(
                "outbox.UnknownJob", f"no handler is registered for {job.job_name}", ""
            )
            self._settle(d, Outcome(Kind.FAILED, job, failure))
        elif job.attempts > limit:  # its worker died on the last attempt
            self._spawn(self._exhausted(d, job, limit, handler.transactional))
        else:
            self.busy += 1
            self.idle.clear()
            self.running[id(job)] = (d, job)
            if handler.is_async:
                self._handlers[id(job)] = self._spawn(self._run_async(job, handler))
            else:
                self._sync_pool().inbox.put((job, handler))
        return True

    async def _exhausted(self, d: D, job: ClaimedJob, limit: int, transactional: bool) -> None:
        """Dead-letter a job past its last attempt, unless that attempt committed: a
        transactional job whose id is in the inbox succeeded (its ack was lost)."""
        inbox = self.ctx.inbox
        if transactional and inbox is not None:
            try:
                if await asyncio.to_thread(inbox.seen, job):
                    self._settle(d, Outcome(Kind.ACKED, job))
                    return
            except Exception as exc:  # the database is down: it comes back after its lease
                error = type(exc).__name__
                log.warning("worker.inbox_lookup_failed", queue=self.queue, error=error)
                return
        why = f"attempt {job.attempts} of {limit}: earlier attempts never reported back"
        self._settle(d, Outcome(Kind.PERMANENT, job, Failure("outbox.AttemptsExhausted", why, "")))

    def _sync_pool(self) -> SyncPool:
        if self._pool is None:
            self._pool = SyncPool(
                self.queue,
                self.cap,
                self.ctx.runner,
                self._outcomes,
                self._pool_stopping,
                self._began,
                self.ctx.clock,
            )
        return self._pool

    def _began(self, job: ClaimedJob) -> None:
        """On a pool thread: a job whose handler has a ``timeout`` begins now."""
        self._outcomes.loop.call_soon_threadsafe(self._arm, job, self.ctx.clock())

    def _arm(self, job: ClaimedJob, began: float) -> None:
        entry = self.running.get(id(job))
        handler = self.ctx.registry.get(job.job_name)
        if entry is None or entry[1] is not job or handler is None or handler.timeout is None:
            return  # it finished before the loop heard it began
        left = max(0.0, handler.timeout - (self.ctx.clock() - began))
        loop = self._outcomes.loop
        self._timers[id(job)] = loop.call_later(left, self._timed_out, job, handler.timeout)

    def _timed_out(self, job: ClaimedJob, seconds: float) -> None:
        """A sync handler past its timeout: the attempt fails now and frees its slot; the
        outcome its thread reports later is ignored (as on SQL)."""
        key = id(job)
        del self._timers[key]
        d, _ = self.running.pop(key)
        self._abandoned.add(key)
        self.ctx.stats.timed_out += 1
        self._freed()
        exc = JobTimeout(f"the handler ran past its {seconds} s timeout")
        self._settle(d, Outcome(Kind.FAILED, job, failure_of(exc)))
        self._pump()

    async def _run_async(self, job: ClaimedJob, handler: Handler) -> None:
        outcome: Outcome | None = None
        try:
            outcome = await self.ctx.runner.run_async(job, handler)
        finally:
            self._handlers.pop(id(job), None)
            if outcome is None:  # cancelled (a second signal): its lease returns it
                self.running.pop(id(job), None)
                self._freed()
        self._finished(outcome)
        self._pump()

    # -- settling -----------------------------------------------------------------

    def _drain(self) -> None:
        self._outcomes.armed = False
        while True:
            try:
                outcome = self._outcomes.get_nowait()
            except Empty:
                break
            self._finished(outcome)
        self._pump()

    def _finished(self, outcome: Outcome) -> None:
        key = id(outcome.job)
        if key in self._abandoned:  # failed at its timeout already
            self._abandoned.discard(key)
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if outcome.ran_s is not None and self.adaptive:
            prefetch = self.prefetch
            prefetch.observe(outcome.ran_s)
            self.window = self.cap + prefetch.value
        d, _ = self.running.pop(key)
        self._freed()
        self._settle(d, outcome)

    def _freed(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.idle.set()
        if not self.room.is_set() and self._want() > 0:
            self.room.set()

    def _settle(self, d: D, outcome: Outcome) -> None:
        """The policy's decision (``outbox.queue.policy``), as the transport writes it."""
        w, job = self.ctx, outcome.job
        handler = w.registry.get(job.job_name)
        snoozes = self._snoozes(d) if outcome.kind is Kind.SNOOZED else 0
        decision = decide(
            outcome,
            max_attempts=w.registry.max_attempts(job.job_name, job.max_attempts),
            backoff=None if handler is None else handler.backoff,
            now_ms=w.now_ms(),
            cancelled=job.id in w.runner.cancelled,
            snoozes=snoozes,
        )
        w.runner.cancelled.discard(job.id)
        w.hooks.job_settled(job, decision.action, decision.delay_ms, decision.error)
        action = decision.action
        if action is Action.ACK:
            w.stats.succeeded += 1
            self._ack(d, job)
        elif action is Action.RELEASE:  # taken by a thread after stop was asked
            self._release(d)
        elif action is Action.RETRY:
            w.stats.retried += 1
            self._retry(d, job, decision.delay_ms)
            self._said(outcome, decision)
        elif action is Action.SNOOZE:
            self._snooze(d, job, snoozes + 1, decision.due_ms)
        elif action in (Action.DEAD, Action.CANCEL):
            w.stats.cancelled += action is Action.CANCEL
            self._spawn(self._bury(d, outcome, decision))
        # Action.LOST needs a lease checked at commit, which no broker worker has.

    def _said(self, outcome: Outcome, decision: Decision) -> None:
        """The job's line, as the SQL worker logs it (``outbox.queue.joblog``)."""
        job, log_ = outcome.job, self.ctx.log
        if decision.action is Action.CANCEL:
            joblog.job_cancelled(log_, job)
            return
        limit = self.ctx.registry.max_attempts(job.job_name, job.max_attempts)
        failure = decision.failure or UNKNOWN_FAILURE
        joblog.job_failed(log_, job, decision.action, failure, outcome.ran_s, limit)

    async def _bury(self, d: D, outcome: Outcome, decision: Decision) -> None:
        if await self._dead_letter(d, outcome.job, decision.failure or UNKNOWN_FAILURE):
            self.ctx.stats.dead += 1
            self._said(outcome, decision)

    def _release(self, d: D) -> None:
        """Hand back a job that never started (stop, ``max_jobs``): its attempt not spent."""
        self.ctx.stats.released += 1
        self._hand_back(d)

    def _releasing_now(self, coro: Awaitable[None]) -> None:
        """A hand-back that takes a round trip before its write: a stop awaits it."""
        task = self._spawn(coro)
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    def _send(self, send: Send) -> None:
        """Queue a write; one task sends the queue out (one socket write a burst)."""
        self._out.append(send)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._out:
            out, self._out = self._out, []
            for send in out:
                await quietly(send())

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _beat(self) -> None:
        """Renew the lease each lease/3 of every delivery held: running, and fetched but
        waiting for a slot (its lease runs from the delivery, not from its start)."""
        while True:
            await asyncio.sleep(self.ctx.config.lease / 3)
            held = [d for d, _ in self.running.values()]
            held += self.waiting
            await quietly(self._extend(held))
            self.ctx.hooks.worker_tick(len(held))  # the loop is alive (/healthz)

    # -- stopping -----------------------------------------------------------------

    async def _finish(self) -> None:
        """Hand back what has not started; give running jobs ``grace`` (a second signal
        ends the wait); then wait for dead-lettering still in flight."""
        self._closed = True
        w = self.ctx
        if w.stopping.is_set() or w.time_up():  # what no thread has taken goes back
            self._pool_stopping.set()
            self._unqueue()
        while self.waiting:
            self._release(self.waiting.popleft())
        if self._releasing:  # their writes out before the grace (bounded)
            await asyncio.wait(set(self._releasing))
        if self.busy or self.tasks:
            deadline = self.ctx.config.grace
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline):
                    await _first(self._settled(), self.ctx.cancelled.wait())
        if self.busy or self.tasks:
            self.ctx.stats.graceful = False
            self.cancel()

    async def _settled(self) -> None:
        await self.idle.wait()
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    async def _close(self, beat: asyncio.Task[None]) -> None:
        """The last writes out; the threads, the ticker and the transport's part ended.
        The writes may start more (an ack that meets an operator's cancel mark becomes a
        dead letter, whose mark goes after it): those end too before the transport
        closes, within the grace, or a mark was left behind with its dead letter."""
        beat.cancel()
        await self._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.ctx.config.grace):
                while pending := self._writing():
                    await asyncio.wait(pending)
                    await self._flush()
        if self._pool is not None:
            self._pool.close()
        await self._closing()

    def _writing(self) -> set[asyncio.Task[Any]]:
        """The tasks still writing: the sender of the queued writes (it may be gathering
        acks) and what they spawned."""
        pending = set(self.tasks)
        if self._sender is not None and not self._sender.done():
            pending.add(self._sender)
        return pending

    def cancel(self) -> None:
        """Cancel async handlers now (sync ones cannot be: their lease returns them)."""
        for t in self.tasks:
            t.cancel()


async def quietly(aw: Awaitable[None]) -> None:
    """A write that fails (connection lost) is not fatal: the delivery comes back after
    its lease."""
    try:
        await aw
    except Exception as exc:
        log.debug("worker.ack_failed", error=type(exc).__name__)


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()

