"""One queue of the JetStream worker: its fetched messages, running jobs and their leases.

Everything here runs on the worker's event loop except sync handlers, which run on
``cap`` long-lived threads (``SyncPool``, as on SQL): a sync handler may block, so it
never runs on the loop. The loop owns all the state, so the cap is a counter, not a
semaphore, and a job costs no task of its own unless its handler is async::

    puller callback ─► waiting ─► (a slot is free) start ─┬─ sync: the pool's inbox
         (a batch per           │                          └─ async: one task
          loop turn)            └─ stopping, or max_jobs/max_time reached: NAK at once
    outcomes ─► settle (``outbox.queue.policy`` decides, as on SQL): ack / NAK with
                backoff / dead letter / snooze; the slot starts the next

A snooze publishes the job again, due later, and terminates its message (the format is
in ``outbox.jetstream.codec``): a NAK would spend an attempt, as JetStream counts every
delivery. A keyed job's snooze must keep its place, so ``outbox.jetstream.ordered``'s
lane overrides the hooks for it (``_snooze``, ``_snoozes``). A NAK of a job that never
started (a release, an early delivery) is written down first, so its redelivery spends no
attempt (``outbox.jetstream.uncounted``); a lane never fetches past what it may start
(its window, and ``max_jobs``), so a graceful stop releases only its prefetch.

A sync handler past its ``timeout`` is failed as on SQL (``JobTimeout``,
retried or dead-lettered) and its slot is freed at once; its thread runs the handler to
its end with the result ignored, and the next job waits for a free thread.

The costs are paid per burst, not per job: outcomes of sync handlers come back on one
queue whose first put of a burst wakes the loop (one ``call_soon_threadsafe`` for many
jobs); acks and NAKs are queued and written by one task, so a burst leaves in one
socket write; one ticker per queue sends the in-progress acks of every message the lane
holds, running or waiting for a slot, each lease/3 (without them a fetched job that
waits past the ack wait would be redelivered to another worker and run twice).

A lane sees of its worker only the ``LaneContext`` the worker's lanes share: settings,
handlers, counts, hooks, clocks and the stop signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from queue import Empty, SimpleQueue
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from outbox.db.rows import ClaimedJob, Failure
from outbox.hooks import NO_HOOKS, Hooks
from outbox.jetstream import codec, names, uncounted
from outbox.jetstream.inbox import InboxRunner
from outbox.jetstream.pull import Puller
from outbox.jetstream.uncounted import Counts
from outbox.log import get_logger
from outbox.queue import joblog
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.execute import JobTimeout, Kind, Outcome, Runner, SyncPool, failure_of
from outbox.queue.policy import UNKNOWN_FAILURE, Action, Decision, decide
from outbox.queue.registry import Handler, Registry

log = get_logger("outbox.worker")
Send = Callable[[], Awaitable[None]]


@dataclass(eq=False)
class LaneContext:
    """What the lanes of one worker share, and all a lane sees of its worker: the
    settings, the handlers, the counts, the clocks and the stop signals."""

    config: WorkerConfig
    registry: Registry
    runner: Runner
    stats: WorkerStats
    hooks: Hooks = NO_HOOKS
    clock: Callable[[], float] = time.monotonic  # the schedule: leases, timeouts, max_time
    wall_clock: Callable[[], float] = time.time  # UNIX seconds: when a job is due
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)  # a second signal
    started: int = 0  # jobs started, for max_jobs
    began: float = 0.0  # by ``clock``, for max_time
    paused: set[str] = field(default_factory=set)  # queues paused (``outbox.jetstream.control``)
    cancel_marks: set[str] = field(default_factory=set)  # message ids an operator cancelled
    inbox: InboxRunner | None = None  # transactional handlers' inbox (``outbox.jetstream.inbox``)
    log: Any = log  # bound to the worker's id: the per-job lines (``outbox.queue.joblog``)

    def done(self) -> bool:
        """``max_jobs`` started, or ``max_time`` over."""
        c = self.config
        if c.max_jobs is not None and self.started >= c.max_jobs:
            return True
        return c.max_time is not None and self.clock() - self.began >= c.max_time

    async def pause(self, seconds: float) -> None:
        """Sleep, unless stop is asked first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.stopping.wait()

    def now_ms(self) -> int:
        return int(self.wall_clock() * 1000)


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


def delivery_meta(msg: Msg) -> tuple[int, int, float]:
    """Stream sequence, delivery count and the delivery time in UNIX ms, read from the
    reply subject (``$JS.ACK.<stream>.<consumer>.<delivered>.<seq>.<cseq>.<ns>.<pending>``)
    without building nats-py's ``Metadata``; other forms go through it."""
    parts = (msg.reply or "").split(".")
    if len(parts) == 9 and parts[1] == "ACK":
        return int(parts[5]), int(parts[4]), int(parts[7]) / 1e6
    meta = msg.metadata
    return meta.sequence.stream, meta.num_delivered, meta.timestamp.timestamp() * 1000


class Lane:
    """Fetches, runs and settles the jobs of one queue, at most ``cap`` at a time."""

    def __init__(
        self,
        ctx: LaneContext,
        nc: Client,
        js: JetStreamContext,
        queue: str,
        cap: int,
        bands: int = 1,
    ) -> None:
        self.ctx, self.js, self.queue, self.cap = ctx, js, queue, cap
        config = ctx.config
        self.window = cap + (config.prefetch if config.prefetch is not None else cap)
        self.waiting: deque[Msg] = deque()
        self.running: dict[int, tuple[Msg, ClaimedJob]] = {}  # id(job) → its message
        self.busy = 0  # slots taken: len(running)
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
        self._ended_empty = False  # a held-open request found nothing
        self._linger = False  # the last no_wait request found nothing: hold the next open
        self._closed = False  # fetching is over: whatever still arrives is NAKed
        self.kv: KeyValue | None = None  # the bucket of uncounted deliveries
        self.counts: dict[int, Counts] = {}  # stream seq → its uncounted deliveries
        self.looking = 0  # redelivered messages whose counts are being read
        self._releasing: set[asyncio.Task[Any]] = set()
        # One puller per priority band (``names.consumer``), one request open at a time:
        # each fetch asks the most urgent band first and moves to the next only when a
        # band has nothing now (``_request_ended``).
        self.pullers = [
            Puller(
                nc,
                names.stream(queue),
                self._consumer_name(b),
                self._arrived,
                partial(self._request_ended, b),
                ctx.clock,
            )
            for b in range(bands)
        ]
        self.band = 0  # the band the next request goes to
        self.puller = self.pullers[0]
        self._sweep_lingered = False  # this sweep's band-0 request was held open

    def _consumer_name(self, index: int) -> str:
        """The durable consumer of puller ``index``: one per priority band here."""
        return names.consumer(index)

    def _uncounted(self, seq: int) -> int:
        """Deliveries of message ``seq`` that spent no attempt: its releases and early
        deliveries, and a keyed job's snoozes (``outbox.jetstream.uncounted``)."""
        return self.counts.get(seq, Counts()).uncounted

    def _snoozes(self, msg: Msg) -> int:
        """How often the job of ``msg`` was snoozed (here: its message's header)."""
        return codec.snooze_count(msg.headers)

    def _snooze(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        self._spawn(self._snooze_now(msg, job, n, due_ms))

    def _ended(self, seq: int) -> None:
        """Message ``seq`` left the stream (acked or terminated): its counts go too."""
        if self.counts.pop(seq, None) is not None and self.kv is not None:
            self._spawn(self._forget(seq))

    async def _forget(self, seq: int) -> None:
        assert self.kv is not None
        with contextlib.suppress(Exception):  # a leftover count is harmless
            await self.kv.purge(uncounted.key(self.queue, seq))

    # -- fetching -----------------------------------------------------------------

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
        """The queue was paused or resumed: fetch and start again, or stop doing so."""
        self.room.set()
        self._pump()

    def _want(self) -> int:
        """How many to ask for now: 0 while a request is open or the window is full
        enough (refill by half windows while every slot has work, not per job)."""
        if self.puller.busy(self.ctx.clock()) or self.paused():
            return 0
        held = self._held()
        want = min(self.window - held, self._jobs_left())
        if held >= self.cap and want < max(1, self.window // 2):
            return 0
        return max(0, want)

    def _jobs_left(self) -> int:
        """How many more messages this worker may still start (``max_jobs``) beyond the
        ones this lane holds: fetching more would only release them at the limit."""
        left = self.ctx.config.max_jobs
        if left is None:
            return self.window
        return left - self.ctx.started - (self._held() - self.busy)

    async def _open(self) -> None:
        """Before the first fetch: the bucket of uncounted deliveries, every puller's inbox."""
        self.kv = await uncounted.bucket(self.js)
        for puller in self.pullers:
            await puller.start()

    async def _fetch_failed(self, error: str) -> None:
        """A pull request failed or was refused: say so, pause ``sleep`` (stop ends the
        pause), then ask again (every lane's one decision on it)."""
        log.warning("worker.fetch_failed", queue=self.queue, error=error)
        await self.ctx.pause(self.ctx.config.sleep)

    async def run(self) -> None:
        """Fetch until stopped, done, or (``stop_when_empty``) nothing is left."""
        w, config = self.ctx, self.ctx.config
        wait = min(config.sleep, 0.25) if config.stop_when_empty else config.sleep
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            while not w.stopping.is_set() and not w.done():
                if self.puller.failed:
                    failed, self.puller.failed = self.puller.failed, ""
                    await self._fetch_failed(failed)
                    continue
                if config.stop_when_empty and self.paused():
                    break  # nothing is claimable from a paused queue
                if config.stop_when_empty and self._ended_empty and not self._held():
                    break
                want = self._want()
                if want <= 0:
                    await self._wait_for_room()
                    continue
                self._ended_empty = False
                try:
                    await self.puller.request(want, wait, no_wait=not self._linger)
                except Exception as exc:  # the connection is reconnecting: wait, try again
                    await self._fetch_failed(type(exc).__name__)
            await self._finish()
        finally:
            await self._close(beat)

    async def run_round(self) -> None:
        """One round (``JetStreamWorker.run_once``): one request for what is deliverable
        now, then run and settle all of it; the acks are out when it returns."""
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            await self._ask_round()
            await self._round_settled()
        finally:
            self.cancel()  # only a round's timeout leaves async handlers running
            await self._close(beat)

    async def _ask_round(self) -> None:
        """A round's requests: one for what the window takes, of the first band."""
        want = self._want()
        if want > 0:
            await self.puller.request(want, 0.0, no_wait=True)

    async def _round_settled(self) -> None:
        """Until every request of the round has ended (its last message or status, or its
        deadline), then until what it fetched has run and settled."""
        while True:
            now = self.ctx.clock()
            open_ = [p for p in self.pullers if p.busy(now)]
            if not open_:
                break
            self.room.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(max(p.deadline for p in open_) - now, 0.01)):
                    await self.room.wait()
        while self.waiting or self.busy or self.tasks or self.looking:
            if self.busy:
                await self.idle.wait()
            elif self.tasks:
                await asyncio.wait(set(self.tasks))
            else:
                await asyncio.sleep(0)

    async def _close(self, beat: asyncio.Task[None]) -> None:
        """The last acks out; the threads, the ticker and the subscription ended."""
        beat.cancel()
        await self._flush()
        if self._pool is not None:
            self._pool.close()
        for puller in self.pullers:
            with contextlib.suppress(Exception):
                await puller.stop()

    def _held(self) -> int:
        """Messages fetched and not settled: waiting (or being looked up) and running."""
        return len(self.waiting) + self.looking + self.busy

    async def _wait_for_room(self) -> None:
        """Until a fetch may be due: the open request's end, or at most ``sleep`` (a
        lane that reached ``max_jobs`` through another lane's starts is told nothing)."""
        self.room.clear()
        if self._want() > 0 or self.ctx.stopping.is_set():
            return
        wait = self.ctx.config.sleep
        if self.puller.open:
            wait = min(max(self.puller.deadline - self.ctx.clock(), 0.01), wait)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self.room.wait()

    def _arrived(self, msg: Msg) -> None:
        seq, delivered, _ = delivery_meta(msg)
        if delivered > 1 and self.kv is not None:  # it may have been released: ask first
            self.looking += 1
            self._spawn(self._arrived_again(msg, seq))
        else:
            self._wait_for_slot(msg)

    async def _arrived_again(self, msg: Msg, seq: int) -> None:
        """A redelivery: read its uncounted deliveries before it may start."""
        assert self.kv is not None
        began = self.ctx.clock()
        give_up_at = began + self.ctx.config.lease * 2 / 3
        try:
            counts, error = await uncounted.lookup(
                self.kv, self.queue, seq, self.ctx.clock, give_up_at
            )
        finally:
            self.looking -= 1
        if error:  # counted as attempts: never more runs than allowed
            log.warning("worker.count_lookup_failed", queue=self.queue, error=error)
        if counts.uncounted:
            self.counts[seq] = counts
        if self.ctx.clock() - began > self.ctx.config.lease / 3:  # the beat did not see it
            await _quietly(msg.in_progress())
        self._wait_for_slot(msg)

    def _wait_for_slot(self, msg: Msg) -> None:
        if self._closed:
            self._release(msg)
        else:
            self.waiting.append(msg)
            self._pump()

    def _request_ended(self, band: int) -> None:
        if band != self.band:
            return  # a late status of a request given up (``Puller.busy``)
        p = self.puller
        if p.got == 0 and not p.failed:
            if band == 0:
                self._sweep_lingered = p.lingered
            if band + 1 < len(self.pullers):  # nothing in this band now: the next one
                self._to_band(band + 1)
                self._linger = False
            else:  # every band empty: hold the next request open, on the most urgent
                self._to_band(0)
                self._ended_empty, self._linger = self._sweep_lingered, True
        else:
            self._to_band(0)
            self._linger = False
        self.room.set()

    def _to_band(self, band: int) -> None:
        self.band, self.puller = band, self.pullers[band]

    # -- starting -----------------------------------------------------------------

    def _pump(self) -> None:
        """Start waiting messages while slots are free."""
        w = self.ctx
        while self.waiting and self.busy < self.cap and not self.paused():
            msg = self._most_urgent()
            if self._closed or w.stopping.is_set() or w.done():
                self._release(msg)
            else:
                w.started += 1
                self._start(msg)

    def _most_urgent(self) -> Msg:
        """The next waiting message to start: the first of the most urgent band held."""
        waiting = self.waiting
        if len(self.pullers) == 1:
            return waiting.popleft()
        best, at = 10, 0
        for i, msg in enumerate(waiting):
            band = names.band_of_subject(msg.subject)
            if band < best:
                best, at = band, i
                if band == 0:
                    break
        msg = waiting[at]
        del waiting[at]
        return msg

    def _start(self, msg: Msg) -> None:
        w, queue = self.ctx, self.queue
        seq, delivered, _ = delivery_meta(msg)
        try:
            job = codec.decode_job(queue, seq, delivered, msg.headers, msg.data)
        except codec.ForeignMessage as exc:
            body = codec.foreign_body(queue, delivered, msg.headers, msg.data, str(exc))
            log.warning("worker.foreign_message", queue=queue, seq=seq)
            self._bury(msg, seq, body)
            return
        now_ms = self.ctx.now_ms()
        if job.available_at > now_ms:
            self._hand_back(msg, (job.available_at - now_ms) / 1000)
            return
        job.priority = names.band_of_subject(msg.subject)
        job.attempts -= self._uncounted(seq)
        w.stats.claimed += 1
        handler = w.registry.get(job.job_name)
        limit = w.registry.max_attempts(job.job_name, job.max_attempts)
        if job.message_id in w.cancel_marks:  # cancelled before it ran: never runs
            self._settle(msg, Outcome(Kind.CANCELLED, job))
        elif handler is None:
            w.stats.unknown += 1
            failure = Failure(
                "outbox.UnknownJob", f"no handler is registered for {job.job_name}", ""
            )
            self._settle(msg, Outcome(Kind.FAILED, job, failure))
        elif job.attempts > limit:  # its worker died on the last attempt
            self._spawn(self._exhausted(msg, job, limit, handler.transactional))
        else:
            self.busy += 1
            self.idle.clear()
            self.running[id(job)] = (msg, job)
            if handler.is_async:
                self._handlers[id(job)] = self._spawn(self._run_async(job, handler))
            else:
                self._sync_pool().inbox.put((job, handler))

    async def _exhausted(self, msg: Msg, job: ClaimedJob, limit: int, transactional: bool) -> None:
        """Dead-letter a job past its last attempt, unless that attempt committed: a
        transactional job whose id is in the inbox succeeded (its ack was lost)."""
        inbox = self.ctx.inbox
        if transactional and inbox is not None:
            try:
                if await asyncio.to_thread(inbox.seen, job):
                    self._settle(msg, Outcome(Kind.ACKED, job))
                    return
            except Exception as exc:  # the database is down: it comes back after the ack wait
                error = type(exc).__name__
                log.warning("worker.inbox_lookup_failed", queue=self.queue, error=error)
                return
        why = f"attempt {job.attempts} of {limit}: earlier attempts never reported back"
        self._settle(
            msg, Outcome(Kind.PERMANENT, job, Failure("outbox.AttemptsExhausted", why, ""))
        )

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
        msg, _ = self.running.pop(key)
        self._abandoned.add(key)
        self.ctx.stats.timed_out += 1
        self._freed()
        exc = JobTimeout(f"the handler ran past its {seconds} s timeout")
        self._settle(msg, Outcome(Kind.FAILED, job, failure_of(exc)))
        self._pump()

    async def _run_async(self, job: ClaimedJob, handler: Handler) -> None:
        outcome: Outcome | None = None
        try:
            outcome = await self.ctx.runner.run_async(job, handler)
        finally:
            self._handlers.pop(id(job), None)
            if outcome is None:  # cancelled (a second signal): the ack wait returns it
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
        msg, _ = self.running.pop(key)
        self._freed()
        self._settle(msg, outcome)

    def _freed(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.idle.set()
        if not self.room.is_set() and self._want() > 0:
            self.room.set()

    def _settle(self, msg: Msg, outcome: Outcome) -> None:
        """The policy's decision (``outbox.queue.policy``), as JetStream writes it."""
        w, job = self.ctx, outcome.job
        handler = w.registry.get(job.job_name)
        snoozes = self._snoozes(msg) if outcome.kind is Kind.SNOOZED else 0
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
            self._send(msg.ack)
            self._ended(job.id)
        elif action is Action.RELEASE:  # taken by a thread after stop was asked
            self._release(msg)
        elif action is Action.RETRY:
            w.stats.retried += 1
            self._send(partial(msg.nak, delay=decision.delay_ms / 1000))
            self._said(outcome, decision)
        elif action is Action.SNOOZE:
            self._snooze(msg, job, snoozes + 1, decision.due_ms)
        elif action in (Action.DEAD, Action.CANCEL):
            w.stats.cancelled += action is Action.CANCEL
            failure = decision.failure or UNKNOWN_FAILURE
            body = codec.dead_body(job, failure, msg.subject)
            self._bury(msg, job.id, body, partial(self._said, outcome, decision))
        # Action.LOST needs a transactional handler, which a broker worker refuses.

    def _said(self, outcome: Outcome, decision: Decision) -> None:
        """The job's line, as the SQL worker logs it (``outbox.queue.joblog``)."""
        job, log_ = outcome.job, self.ctx.log
        if decision.action is Action.CANCEL:
            joblog.job_cancelled(log_, job)
            return
        limit = self.ctx.registry.max_attempts(job.job_name, job.max_attempts)
        failure = decision.failure or UNKNOWN_FAILURE
        joblog.job_failed(log_, job, decision.action, failure, outcome.ran_s, limit)

    async def _snooze_now(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        """Publish the job again, due at ``due_ms``, then terminate this message; if the
        publish fails this one is left alone and comes back after the ack wait (as a
        retry), nothing lost."""
        headers = codec.job_headers(
            job.message_id,
            job.job_name,
            job.max_attempts,
            due_ms,
            job.created_at,
            msg_id=f"{job.message_id}:snooze:{job.id}",
            snoozes=n,
            attempts_before=job.attempts - 1,
            trace_context=job.trace_context,
        )
        try:
            await self.js.publish(msg.subject, msg.data, headers=headers)  # the same band
        except Exception as exc:
            log.warning("worker.snooze_failed", queue=self.queue, error=type(exc).__name__)
            return
        self.ctx.stats.snoozed += 1
        self._send(msg.term)

    def _release(self, msg: Msg) -> None:
        """Hand back a job that never started (stop, ``max_jobs``): NAKed, uncounted."""
        self.ctx.stats.released += 1
        self._hand_back(msg)

    def _hand_back(self, msg: Msg, delay: float | None = None) -> None:
        """NAK a message whose job did not run (after ``delay`` seconds, or at once),
        its redelivery written down first as one that spends no attempt."""
        if self.kv is None:
            self._send(msg.nak if delay is None else partial(msg.nak, delay=delay))
            return
        task = self._spawn(self._hand_back_now(msg, delay))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _hand_back_now(self, msg: Msg, delay: float | None) -> None:
        assert self.kv is not None
        seq = delivery_meta(msg)[0]
        counts = self.counts.pop(seq, Counts()).released_once_more()
        try:
            await self.kv.put(uncounted.key(self.queue, seq), counts.encode())
        except Exception as exc:  # the NAK goes out anyway, counted: sooner than the ack wait
            log.warning("worker.release_count_failed", queue=self.queue, error=type(exc).__name__)
        self._send(msg.nak if delay is None else partial(msg.nak, delay=delay))

    def _send(self, send: Send) -> None:
        """Queue an ack/NAK; one task writes the queue out (one socket write a burst)."""
        self._out.append(send)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._out:
            out, self._out = self._out, []
            for send in out:
                await _quietly(send())

    def _bury(
        self, msg: Msg, seq: int, body: bytes, buried: Callable[[], None] = lambda: None
    ) -> None:
        self._spawn(self._bury_now(msg, seq, body, buried))

    async def _bury_now(
        self, msg: Msg, seq: int, body: bytes, buried: Callable[[], None]
    ) -> None:
        """Copy to the dead-letter stream, then terminate; if the copy fails the message
        is left alone and comes back after the ack wait, so nothing is lost."""
        queue = self.queue
        dedupe = f"dead:{names.stream(queue)}:{seq}"
        try:
            await self.js.publish(names.dead_subject(queue), body, headers={codec.MSG_ID: dedupe})
        except Exception as exc:
            log.warning("worker.dead_letter_failed", queue=queue, error=type(exc).__name__)
            return
        self.ctx.stats.dead += 1
        self._send(msg.term)
        self._ended(seq)
        buried()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _beat(self) -> None:
        """In-progress acks each lease/3 for every message held: running, and fetched but
        waiting for a slot (its ack wait runs from the delivery, not from its start)."""
        while True:
            await asyncio.sleep(self.ctx.config.lease / 3)
            held = [msg for msg, _ in self.running.values()]
            held += self.waiting
            for msg in held:
                await _quietly(msg.in_progress())
            self.ctx.hooks.worker_tick(len(held))  # the loop is alive (/healthz)

    # -- stopping -----------------------------------------------------------------

    async def _finish(self) -> None:
        """NAK what has not started; give running jobs ``grace`` (a second signal ends
        the wait); then wait for dead-lettering still in flight."""
        self._closed = True
        if self.ctx.stopping.is_set():  # a thread yet to take its job NAKs it
            self._pool_stopping.set()
        while self.waiting:
            self._release(self.waiting.popleft())
        if self._releasing:  # their NAKs out before the grace (a KV write each, bounded)
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

    def cancel(self) -> None:
        """Cancel async handlers now (sync ones cannot be: the ack wait returns them)."""
        for t in self.tasks:
            t.cancel()


async def _quietly(aw: Awaitable[None]) -> None:
    """An ack/nak/progress that fails (connection lost) is not fatal: the message comes
    back after the ack wait."""
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
