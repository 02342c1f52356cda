"""The worker on JetStream: the same ``Registry``, handlers and ``ctx`` as on SQL.

Each queue has one durable pull consumer (``names.CONSUMER``) shared by every worker
process, so JetStream spreads its messages over them. One asyncio loop runs all queues;
async handlers run on it, sync ones on a thread pool (the ``Runner`` of
``outbox.queue.execute`` calls both, exactly as the SQL worker does).

A message's life, per delivery::

    fetched ─► waiting for a slot ─► running ─┬─ returned ─────────────► ack (leaves the stream)
       │        (cap per queue)      │ in-    ├─ raised, attempts left ─► NAK with the
       │                             │ progress│                           handler's backoff
       │                             │ ack every├─ PermanentFailure, or
       │                             │ lease/3  │  the last attempt ─────► copy to the dead-
       │                             ▼          │                         letter stream, then
       │                    worker dies: JetStream redelivers after the   AckTerm
       │                    ack wait (the lease)
       └─ not ours (ForeignMessage) ─► dead-letter stream, AckTerm

The attempt is JetStream's delivery count. A job handed off before it is due is NAKed
with the time left, once, and that delivery is not counted. The consumer's own
``max_deliver`` is a backstop only, set past the largest ``max_attempts`` a job can
have: the per-job limit is the job's ``max_attempts`` (recorded, else the registry's),
which one consumer-wide number cannot express, and the worker enforces it on every
delivery (a job whose worker died on its last attempt is dead-lettered on arrival).

A worker never creates a stream (the relay does, with the fleet's settings): it waits
for a missing one, and refuses one set up wrongly.

Graceful stop (SIGTERM/SIGINT): no new fetches; fetched jobs that have not started are
NAKed at once (unlike SQL, JetStream counts that delivery); running jobs get ``grace``
seconds, after which the ack wait returns them. Transactional handlers are refused:
a broker shares no transaction with the application's database.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError

from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob, Failure
from outbox.errors import BrokerError, ConfigurationError
from outbox.jetstream import codec, names, provision
from outbox.jetstream.connect import BrokerUrl, connect
from outbox.job import MAX_ATTEMPTS_LIMIT
from outbox.queue.config import WorkerConfig, WorkerStats, new_worker_id
from outbox.queue.execute import Kind, Outcome, Runner
from outbox.queue.registry import Handler, Registry

log = structlog.get_logger("outbox.worker")
_BACKSTOP_DELIVERIES = MAX_ATTEMPTS_LIMIT + 2


def refuse_sql_only(registry: Registry, config: WorkerConfig) -> None:
    """What needs the SQL queue cannot run on a broker: say which, before anything runs.

    A transactional handler needs a transaction shared with the database; global
    concurrency and rate limits are held in the database's tables.
    """
    names_ = sorted(n for n in registry if (h := registry.get(n)) and h.transactional)
    if names_:
        raise ConfigurationError(
            f"job {names_[0]} is transactional, which needs the SQL queue: a broker shares "
            "no transaction with your database (drop transactional=True or run without "
            "--broker)"
        )
    limited = sorted(registry.limited)
    if limited:
        raise ConfigurationError(
            f"job {limited[0]} has a global concurrency or rate limit, which the SQL queue "
            "holds: a broker worker does not apply them (drop the limit or run without "
            "--broker)"
        )
    if config.queue_limits:
        raise ConfigurationError(
            "--queue-concurrency is held by the SQL queue: a broker worker does not apply "
            "it (drop it or run without --broker)"
        )


class JetStreamWorker:
    """Runs the jobs of ``config.queues`` from JetStream until stopped (``run``)."""

    def __init__(
        self,
        url: BrokerUrl,
        registry: Registry,
        config: WorkerConfig | None = None,
    ) -> None:
        self.config = config or WorkerConfig()
        self.config.check()
        refuse_sql_only(registry, self.config)
        self.url, self.registry = url, registry
        self.worker_id = new_worker_id()
        # No transactional handler runs here, so the Runner never opens a database.
        self.runner = Runner(registry, self.worker_id, cast(Database, None))
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._started = 0
        self._running: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> WorkerStats:
        """Connect, run until stopped (signal, limits, or empty with stop_when_empty)."""
        asyncio.run(self._main())
        return self.stats

    def stop(self) -> None:
        """Ask for a graceful stop; safe from any thread (as a signal would)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stopping.set)
        else:
            self._stopping.set()

    async def _main(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals > 1:
                self.stats.graceful = False
                for t in self._running:
                    t.cancel()
            self._stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
        nc = await connect(self.url)
        caps = self.config.caps()
        self._pool = ThreadPoolExecutor(max_workers=sum(caps.values()), thread_name_prefix="job")
        self._began = time.monotonic()
        try:
            js = nc.jetstream()
            log.info("worker.started", broker=self.url.shown, queues=list(caps))
            await asyncio.gather(*(self._queue(js, q, caps[q]) for q in caps))
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            with contextlib.suppress(Exception):
                await nc.flush(timeout=2)  # the last acks out, then close (drain waits
            with contextlib.suppress(Exception):  # on the pull subscription's timeout)
                await nc.close()
            log.info(
                "worker.stopped",
                succeeded=self.stats.succeeded,
                retried=self.stats.retried,
                dead=self.stats.dead,
            )

    async def _subscribe(self, js: JetStreamContext, queue: str) -> Any:
        """The queue's consumer, once its stream exists: the relay (or an operator)
        creates streams with the fleet's settings; a worker never does, or it could make
        one with the wrong replicas. A stream set up wrongly is an error; a missing one
        is waited for (with ``stop_when_empty``, nothing is claimable: None)."""
        warned = False
        while True:
            try:
                await provision.ensure(js, queue, provision.StreamSettings(), "require")
                break
            except BrokerError as exc:
                if "does not exist" not in str(exc):
                    raise
            if self.config.stop_when_empty or self._stopping.is_set():
                return None
            if not warned:
                log.warning("worker.waiting_for_stream", queue=queue, stream=names.stream(queue))
                warned = True
            await _first(asyncio.sleep(self.config.sleep), self._stopping.wait())
        config = ConsumerConfig(
            durable_name=names.CONSUMER,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.config.lease,
            max_deliver=_BACKSTOP_DELIVERIES,
            max_ack_pending=-1,
            filter_subject=names.subject(queue),
        )
        try:
            await js.add_consumer(names.stream(queue), config)
        except APIError as exc:  # an existing consumer keeps its settings
            log.warning("worker.consumer_kept", queue=queue, error=exc.description or "")
        return await js.pull_subscribe_bind(names.CONSUMER, stream=names.stream(queue))

    def _done(self) -> bool:
        c = self.config
        if c.max_jobs is not None and self._started >= c.max_jobs:
            return True
        return c.max_time is not None and time.monotonic() - self._began >= c.max_time

    async def _queue(self, js: JetStreamContext, queue: str, cap: int) -> None:
        sub = await self._subscribe(js, queue)
        if sub is None:
            return
        slots = asyncio.Semaphore(cap)
        ahead = self.config.prefetch if self.config.prefetch is not None else cap
        held: set[asyncio.Task[None]] = set()
        room = asyncio.Event()
        fetch_wait = (
            min(self.config.sleep, 0.25) if self.config.stop_when_empty else self.config.sleep
        )
        while not self._stopping.is_set() and not self._done():
            want = cap + ahead - len(held)
            if self.config.max_jobs is not None:
                want = min(want, self.config.max_jobs - self._started)
            # While every slot has work waiting, refill in batches (half the window at a
            # time), not one fetch round trip per finished job.
            if want <= 0 or (len(held) >= cap and want < max(1, (cap + ahead) // 2)):
                room.clear()
                await _first(room.wait(), self._stopping.wait())
                continue
            try:
                msgs = await sub.fetch(want, timeout=fetch_wait)
            except TimeoutError:
                if self.config.stop_when_empty and not held:
                    break
                continue
            except Exception as exc:  # the connection is reconnecting: wait, try again
                log.warning("worker.fetch_failed", queue=queue, error=type(exc).__name__)
                await _first(asyncio.sleep(self.config.sleep), self._stopping.wait())
                continue
            for msg in msgs:
                task = asyncio.create_task(self._deliver(js, queue, msg, slots))
                held.add(task)
                task.add_done_callback(held.discard)
                task.add_done_callback(lambda _t: room.set())
        await self._finish(held)

    async def _finish(self, held: set[asyncio.Task[None]]) -> None:
        if not held:
            return
        _, late = await asyncio.wait(held, timeout=self.config.grace)
        for t in late:
            t.cancel()
        if late:
            self.stats.graceful = False

    async def _deliver(
        self, js: JetStreamContext, queue: str, msg: Msg, slots: asyncio.Semaphore
    ) -> None:
        async with slots:
            if self._stopping.is_set() or self._done():
                self.stats.released += 1
                await _quietly(msg.nak())
                return
            self._started += 1
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            try:
                await self._one(js, queue, msg)
            finally:
                self._running.discard(task)

    async def _one(self, js: JetStreamContext, queue: str, msg: Msg) -> None:
        meta = msg.metadata
        seq, delivered = meta.sequence.stream, meta.num_delivered
        try:
            job = codec.decode_job(queue, seq, delivered, msg.headers, msg.data)
        except codec.ForeignMessage as exc:
            body = codec.foreign_body(queue, delivered, msg.headers, msg.data, str(exc))
            log.warning("worker.foreign_message", queue=queue, seq=seq)
            await self._bury(js, queue, msg, body)
            return
        now_ms = time.time() * 1000
        if job.available_at > now_ms:
            await _quietly(msg.nak(delay=(job.available_at - now_ms) / 1000))
            return
        if job.available_at > meta.timestamp.timestamp() * 1000 + 1:
            job.attempts = max(1, delivered - 1)  # the early delivery did not count
        self.stats.claimed += 1
        await self._execute(js, queue, msg, job)

    async def _execute(self, js: JetStreamContext, queue: str, msg: Msg, job: ClaimedJob) -> None:
        handler = self.registry.get(job.job_name)
        limit = self.registry.max_attempts(job.job_name, job.max_attempts)
        if handler is None:
            self.stats.unknown += 1
            outcome = Outcome(
                Kind.FAILED,
                job,
                Failure("outbox.UnknownJob", f"no handler is registered for {job.job_name}", ""),
            )
        elif job.attempts > limit:  # its worker died on the last attempt
            outcome = Outcome(
                Kind.PERMANENT,
                job,
                Failure(
                    "outbox.AttemptsExhausted",
                    f"attempt {job.attempts} of {limit}: earlier attempts never reported back",
                    "",
                ),
            )
        else:
            outcome = await self._run(msg, job, handler)
        if outcome.kind is Kind.DONE:
            self.stats.succeeded += 1
            await _quietly(msg.ack())
        elif outcome.kind is Kind.FAILED and job.attempts < limit:
            self.stats.retried += 1
            backoff = handler.backoff if handler is not None else None
            delay = backoff.delay(job.attempts) if backoff is not None else 5.0
            await _quietly(msg.nak(delay=delay))
        else:
            failure = outcome.failure or Failure("outbox.Unknown", "", "")
            await self._bury(js, queue, msg, codec.dead_body(job, failure))

    async def _run(self, msg: Msg, job: ClaimedJob, handler: Handler) -> Outcome:
        beat = asyncio.create_task(self._heartbeat(msg))
        try:
            if handler.is_async:
                return await self.runner.run_async(job, handler)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, self.runner.run_sync, job, handler)
        finally:
            beat.cancel()

    async def _heartbeat(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.config.lease / 3)
            await _quietly(msg.in_progress())

    async def _bury(self, js: JetStreamContext, queue: str, msg: Msg, body: bytes) -> None:
        """Copy to the dead-letter stream, then terminate; if the copy fails the message
        is left alone and comes back after the ack wait, so nothing is lost."""
        dedupe = f"dead:{names.stream(queue)}:{msg.metadata.sequence.stream}"
        try:
            await js.publish(names.dead_subject(queue), body, headers={codec.MSG_ID: dedupe})
        except Exception as exc:
            log.warning("worker.dead_letter_failed", queue=queue, error=type(exc).__name__)
            return
        self.stats.dead += 1
        await _quietly(msg.term())


async def _quietly(coro: Any) -> None:
    """An ack/nak/progress that fails (connection lost) is not fatal: the message comes
    back after the ack wait."""
    try:
        await coro
    except Exception as exc:
        log.debug("worker.ack_failed", error=type(exc).__name__)


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
