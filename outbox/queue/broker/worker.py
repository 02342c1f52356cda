"""The run loop of a broker worker, whatever the broker: its lanes, signals and stop.

A ``BrokerWorker`` holds what every transport's worker does the same way: the checks at
start (``outbox.queue.broker.context.refuse_sql_only``), the ``Runner`` (with the inbox when a
transactional handler runs here), the ``LaneContext`` its lanes share, the log lines
bound to its id, graceful stop from any thread or a signal (a second signal cancels
async handlers and stops at once), and lanes that stop together: one that fails asks the
others for a graceful stop (their fetched jobs handed back, running ones given
``grace``) before its error is raised. A transport's worker (``outbox.jetstream.worker``,
``outbox.queue.redis.worker``) connects, finds its streams and runs one lane per queue through
``serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from outbox.db.connection import Database
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.queue import joblog
from outbox.queue.broker.context import LaneContext, refuse_sql_only, runner_for
from outbox.queue.broker.lane import BrokerLane
from outbox.queue.config import WorkerConfig, WorkerStats, new_worker_id
from outbox.queue.registry import Registry

log = get_logger("outbox.worker")


class BrokerWorker:
    """Runs the jobs of ``config.queues`` from a broker until stopped (``run``).

    ``clock`` (monotonic seconds) schedules leases, timeouts and ``max_time``;
    ``wall_clock`` (UNIX seconds) says when a job is due; ``hooks`` hears what happens
    (``outbox.hooks``); ``database`` holds the inbox of transactional handlers
    (``outbox.queue.broker.inbox``), without which they are refused. ``system`` names the
    broker in the attempt spans (``messaging.system``).
    """

    def __init__(
        self,
        registry: Registry,
        config: WorkerConfig | None,
        *,
        system: str,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        hooks: Hooks = NO_HOOKS,
        database: Database | None = None,
    ) -> None:
        config = config or WorkerConfig()
        config.check()
        refuse_sql_only(registry, config, database)
        self.registry, self.config = registry, config
        self.worker_id = new_worker_id()
        runner, self.inbox = runner_for(registry, self.worker_id, database, hooks, system)
        self.ctx = LaneContext(
            config, registry, runner, WorkerStats(), hooks, clock, wall_clock, began=clock()
        )
        self.ctx.inbox = self.inbox
        self.ctx.paused_changed = self.paused_changed
        self.log = self.ctx.log = log.bind(worker_id=self.worker_id)
        self.stats = self.ctx.stats
        self._lanes: list[BrokerLane[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._said_started = False  # worker.stopped follows a worker.started only

    def run(self) -> WorkerStats:
        """Connect, run until stopped (signal, limits, or empty with stop_when_empty)."""
        asyncio.run(self._main())
        return self.stats

    def stop(self) -> None:
        """Ask for a graceful stop; safe from any thread (as a signal would)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop)
        else:
            self.ctx.stopping.set()

    def _stop(self) -> None:
        self.ctx.stopping.set()
        for lane in self._lanes:
            lane.room.set()

    async def _main(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals > 1:
                self.stats.graceful = False
                self.ctx.cancelled.set()
                for lane in self._lanes:
                    lane.cancel()
            self._stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
        try:
            await self.serve()
        finally:
            if self._said_started:
                joblog.worker_stopped(self.log, self.stats)

    async def serve(self) -> None:
        """Connect and run every queue's lanes to their end (``_together``); the
        transport's own."""
        raise NotImplementedError

    def started(self, broker: str) -> None:
        """``worker.started``, as the SQL worker says it, with the broker's URL shown."""
        self.ctx.began = self.ctx.clock()
        self._said_started = True
        caps = self.config.caps()
        prefetch = "cap" if self.config.prefetch is None else self.config.prefetch
        self.log.info(
            "worker.started",
            broker=broker,
            queues=caps,
            prefetch=prefetch,
            **joblog.encryption_fields(),
        )

    def paused_changed(self) -> None:
        """A queue was paused or resumed: every lane looks again."""
        for lane in self._lanes:
            lane.wake()

    def cancel_asked(self, message_id: str) -> None:
        for lane in self._lanes:
            lane.cancel_job(message_id)

    async def run_lane(self, lane: BrokerLane[Any], ended: asyncio.Event | None = None) -> None:
        """Run ``lane`` (its ``run``) to its end, told of a stop asked before it began;
        ``ended`` is set when it is over."""
        self._lanes.append(lane)
        if self.ctx.stopping.is_set():
            lane.room.set()
        try:
            await lane.run()
        finally:
            if ended is not None:
                ended.set()

    async def together(self, runs: list[Awaitable[None]]) -> None:
        """Run ``runs`` to their ends; the first that fails asks the rest for a graceful
        stop (hand-backs and ``grace``, as a signal would), and its error is raised once
        all have ended."""
        failed: list[BaseException] = []

        async def one(run: Awaitable[None]) -> None:
            try:
                await run
            except Exception as exc:
                failed.append(exc)
                self._stop()

        await asyncio.gather(*(one(r) for r in runs))
        if failed:
            raise failed[0]
