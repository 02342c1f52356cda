"""The worker on JetStream: the same ``Registry``, handlers and ``ctx`` as on SQL.

Each queue has one durable pull consumer (``names.CONSUMER``) per priority band shared by
every worker process, so JetStream spreads its messages over them; jobs with an ordering
key come from the queue's ordered partitions instead, one consumer each with one message
in flight (``outbox.jetstream.ordered``, an ``OrderedLane`` beside the queue's ``Lane``).
One asyncio loop runs all queues, each a ``Lane`` (``outbox.jetstream.lane`` draws its
flow and what it pays per burst rather than per job) fed by its own pull requests
(``outbox.jetstream.pull``); async handlers run on the loop, sync ones on long-lived
threads (the ``Runner`` of ``outbox.queue.execute`` calls both, exactly as the SQL
worker does).

A message's life, per delivery::

    fetched ─► waiting for a slot ─► running ─┬─ returned ─────────────► ack (leaves the stream)
       │        (cap per queue;      │ in-    ├─ raised, attempts left,
       │         stop: NAKed;        │ progress│  or a sync handler past
       │         in-progress ack     │ ack every│  its timeout ──────────► NAK with the
       │         every lease/3)      │ lease/3  │                         handler's backoff
       │                             │          ├─ PermanentFailure, or
       │                             │          │  the last attempt ─────► copy to the dead-
       │                             │          │                         letter stream, then
       │                             │          │                         AckTerm
       │                             │          └─ Snooze ───────────────► re-published, due
       │                             ▼                                    later; AckTerm
       │                    worker dies: JetStream redelivers after the
       │                    ack wait (the lease)
       └─ not ours (ForeignMessage) ─► dead-letter stream, AckTerm

What follows each attempt is ``outbox.queue.policy``'s decision, the same as on the SQL
queue; the attempt is JetStream's delivery count. A job handed off before it is due is NAKed
with the time left, once, and that delivery is not counted. The consumer's own
``max_deliver`` is a backstop only, set past the largest ``max_attempts`` a job can
have: the per-job limit is the job's ``max_attempts`` (recorded, else the registry's),
which one consumer-wide number cannot express, and the worker enforces it on every
delivery (a job whose worker died on its last attempt is dead-lettered on arrival).
A snoozed job is a new message that carries the attempts spent before it (its format in
``outbox.jetstream.codec``, the flow in ``outbox.jetstream.lane``), so a snooze spends no
attempt; a keyed job is NAKed instead, keeping its place, its snoozes counted in a bucket
(``outbox.jetstream.ordered``). The snooze past ``MAX_SNOOZES`` dead-letters the job
(``SnoozeLimit``), as on SQL.

A worker never creates a stream (the relay does, with the fleet's settings): it waits
for a missing one, and refuses one set up wrongly. A stream made before ordering keys
gets their subjects from the relay later (``outbox.jetstream.provision``): a worker that
found it without them looks again every ``ORDERED_RECHECK_POLLS`` idle polls and starts
the queue's ``OrderedLane`` when they appear. An ordered consumer that exists with
another ``max_ack_pending`` than 1 is refused: the order rests on it.

The lanes of a worker stop together (``outbox.queue.broker.worker``): one that fails asks the
others for a graceful stop (their fetched jobs NAKed, running ones given ``grace``) before
its error is raised.

Graceful stop (SIGTERM/SIGINT): no new fetches; fetched jobs that have not started are
NAKed at once, their delivery written down as one that spends no attempt (JetStream
counts it; ``outbox.jetstream.uncounted``); running jobs get ``grace``
seconds, after which the ack wait returns them. Transactional handlers run with an
inbox in the database given (``outbox.queue.broker.inbox``): their effects happen once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError

from outbox import tracing
from outbox.db.connection import Database
from outbox.errors import BrokerError
from outbox.hooks import NO_HOOKS, Hooks
from outbox.jetstream import control, names, provision
from outbox.jetstream.connect import BrokerUrl, connect
from outbox.jetstream.lane import Lane
from outbox.jetstream.ordered import OrderedLane
from outbox.job import MAX_ATTEMPTS_LIMIT
from outbox.log import get_logger
from outbox.queue.broker import inbox
from outbox.queue.broker.worker import BrokerWorker
from outbox.queue.config import WorkerConfig
from outbox.queue.registry import Registry

log = get_logger("outbox.worker")
_BACKSTOP_DELIVERIES = MAX_ATTEMPTS_LIMIT + 2
STEP_TIMEOUT_S = 30.0
ORDERED_RECHECK_POLLS = 10  # idle polls (``sleep`` each) between looks for ordered subjects


class JetStreamWorker(BrokerWorker):
    """Runs the jobs of ``config.queues`` from JetStream until stopped (``run``), or one
    round at a time (``run_once``); each queue is one ``Lane`` (``outbox.jetstream.lane``)
    and, for keyed jobs, one ``OrderedLane``. The rest is ``outbox.queue.broker.worker``'s;
    paused queues and cancelled jobs come from the control bucket
    (``outbox.jetstream.control``).
    """

    def __init__(
        self,
        url: BrokerUrl,
        registry: Registry,
        config: WorkerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        hooks: Hooks = NO_HOOKS,
        database: Database | None = None,
    ) -> None:
        super().__init__(
            registry,
            config,
            system=tracing.NATS_SYSTEM,
            clock=clock,
            wall_clock=wall_clock,
            hooks=hooks,
            database=database,
        )
        self.url = url
        self._nc: Client | None = None

    def connected(self) -> bool:
        """The broker connection is up (``/readyz``); safe from any thread."""
        nc = self._nc
        return nc is not None and bool(nc.is_connected)

    def run_once(self, timeout: float = STEP_TIMEOUT_S) -> int:
        """One round: for each queue, fetch what is deliverable now (up to its window),
        run it and settle every outcome; return how many jobs it claimed. Waits up to
        ``timeout`` seconds; jobs still unsettled then come back after the ack wait.
        A queue whose stream does not exist yet is skipped. The caller decides when the
        next round happens; nothing is held between rounds (each connects anew)."""
        before = self.stats.claimed
        asyncio.run(self._round(timeout))
        return self.stats.claimed - before

    async def _round(self, timeout: float) -> None:
        nc = await connect(self.url)
        try:
            js = nc.jetstream()
            async with asyncio.timeout(timeout):
                watch = control.ControlWatch(lambda: None)
                await watch.start(js)
                await watch.stop()
                self.ctx.paused, self.ctx.cancel_marks = watch.paused, watch.cancelled
                for queue, cap in self.config.caps().items():
                    if queue in watch.paused:
                        continue
                    bands, ordered = await self._consumers(js, queue, wait=False)
                    if bands:
                        await Lane(self.ctx, nc, js, queue, cap, bands).run_round()
                    if ordered:
                        await OrderedLane(self.ctx, nc, js, queue, cap, ordered).run_round()
        except TimeoutError:
            log.warning("worker.round_timed_out", timeout_s=timeout)
        finally:
            with contextlib.suppress(Exception):
                await nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await nc.close()

    async def serve(self) -> None:
        nc = self._nc = await connect(self.url)
        caps = self.config.caps()
        watch = control.ControlWatch(self.paused_changed, self.cancel_asked)
        try:
            js = nc.jetstream()
            await watch.start(js)  # the paused queues, read before the first fetch
            self.ctx.paused, self.ctx.cancel_marks = watch.paused, watch.cancelled
            self.started(self.url.shown)
            await self.together([self._queue(nc, js, q, caps[q]) for q in caps])
        finally:
            await watch.stop()
            with contextlib.suppress(Exception):
                await nc.flush(timeout=2)  # the last acks out, then close
            with contextlib.suppress(Exception):
                await nc.close()

    async def _consumers(
        self, js: JetStreamContext, queue: str, *, wait: bool = True
    ) -> tuple[int, int]:
        """The queue's consumers, once its stream exists: the relay (or an operator)
        creates streams with the fleet's settings; a worker never does, or it could make
        one with the wrong replicas. A stream set up wrongly is an error; a missing one
        is waited for (with ``stop_when_empty``, nothing is claimable: 0, 0). Returns how
        many priority bands the stream has (10, or 1 for a stream made before them) and
        how many ordered partitions (``names.ORDERED_PARTITIONS``, or 0 for a stream made
        before them), each with its consumer."""
        warned = False
        while True:
            try:
                found = await provision.ensure(js, queue, provision.StreamSettings(), "require")
                break
            except BrokerError as exc:
                if not provision.stream_missing(exc):
                    raise
            if not wait or self.config.stop_when_empty or self.ctx.stopping.is_set():
                return 0, 0
            if not warned:
                log.warning("worker.waiting_for_stream", queue=queue, stream=names.stream(queue))
                warned = True
            await self.ctx.pause(self.config.sleep)
        if self.inbox is not None:
            inbox.check_retention(names.stream(queue), found.window, self.config.lease)
        bands = len(names.BANDS) if found.banded else 1
        for band in range(bands):
            await self._add_consumer(js, queue, names.consumer(band), names.subject(queue, band))
        return bands, await self._ordered_consumers(js, queue, found.ordered)

    async def _ordered_consumers(self, js: JetStreamContext, queue: str, ordered: bool) -> int:
        """The consumers of the queue's ordered partitions, when its stream has their
        subjects; how many (0 without)."""
        parts = names.ORDERED_PARTITIONS if ordered else 0
        for part in range(parts):  # one message in flight each: one key at a time, in order
            await self._add_consumer(
                js, queue, names.ordered_consumer(part), names.ordered_subject(queue, part), 1
            )
        return parts

    async def _add_consumer(
        self, js: JetStreamContext, queue: str, name: str, subject: str, in_flight: int = -1
    ) -> None:
        config = ConsumerConfig(
            durable_name=name,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.config.lease,
            max_deliver=_BACKSTOP_DELIVERIES,
            max_ack_pending=in_flight,
            filter_subject=subject,
        )
        try:
            await js.add_consumer(names.stream(queue), config)
        except APIError as exc:  # an existing consumer keeps its settings
            if in_flight == 1:
                await _refuse_unordered(js, queue, name)
            log.warning("worker.consumer_kept", queue=queue, error=exc.description or "")

    async def _queue(self, nc: Client, js: JetStreamContext, queue: str, cap: int) -> None:
        bands, parts = await self._consumers(js, queue)
        runs: list[Awaitable[None]] = []
        ended = asyncio.Event()  # the keyless lane's run is over
        if bands:
            runs.append(self.run_lane(Lane(self.ctx, nc, js, queue, cap, bands), ended))
        if parts:
            runs.append(self.run_lane(OrderedLane(self.ctx, nc, js, queue, cap, parts)))
        elif bands:
            log.info("worker.ordered_subjects_missing", queue=queue, stream=names.stream(queue))
            runs.append(self._ordered_later(nc, js, queue, cap, ended))
        await self.together(runs)

    async def _ordered_later(
        self, nc: Client, js: JetStreamContext, queue: str, cap: int, ended: asyncio.Event
    ) -> None:
        """A stream without the ordered subjects, under ``require``: look again every
        ``ORDERED_RECHECK_POLLS`` polls (one stream lookup, not one per poll) while the
        queue's keyless lane runs (until it has ``ended``), and run the ``OrderedLane``
        once the relay has added them."""
        every = self.config.sleep * ORDERED_RECHECK_POLLS
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every):
                    await ended.wait()
            if ended.is_set() or self.ctx.stopping.is_set() or self.ctx.done():
                return
            try:
                found = await provision.ensure(js, queue, provision.StreamSettings(), "require")
            except BrokerError as exc:  # reconnecting, or the stream went: look again later
                log.debug("worker.ordered_lookup_failed", queue=queue, error=str(exc))
                continue
            if found.ordered:
                break
        parts = await self._ordered_consumers(js, queue, True)
        log.info("worker.ordered_lane_started", queue=queue, partitions=parts)
        await self.run_lane(OrderedLane(self.ctx, nc, js, queue, cap, parts))

async def _refuse_unordered(js: JetStreamContext, queue: str, name: str) -> None:
    """An ordered partition's consumer that exists with other settings is kept, unless
    it lets more than one message out at once: then a key's jobs could run together."""
    stream = names.stream(queue)
    try:
        pending = (await js.consumer_info(stream, name)).config.max_ack_pending
    except Exception as exc:
        raise BrokerError(f"consumer {name} of stream {stream} could not be read") from exc
    if pending != 1:
        raise BrokerError(
            f"consumer {name} of stream {stream} has max_ack_pending={pending}, which breaks "
            f"ordering keys (it must be 1): delete it and the worker makes it anew"
        )
