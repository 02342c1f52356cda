"""What the lanes of one broker worker share, and what a broker worker refuses at start."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from outbox.db.connection import Database
from outbox.errors import ConfigurationError
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.queue.broker.inbox import InboxRunner
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.execute import Runner
from outbox.queue.registry import Registry

log = get_logger("outbox.worker")


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
    paused: set[str] = field(default_factory=set)  # queues paused by an operator
    cancel_marks: set[str] = field(default_factory=set)  # message ids an operator cancelled
    inbox: InboxRunner | None = None  # transactional handlers' inbox (queue.broker.inbox)
    # A lane saw ``paused`` change (a transport that reads it in its fetch): every lane of
    # the worker looks again (``BrokerWorker.paused_changed``).
    paused_changed: Callable[[], None] = lambda: None
    log: Any = log  # bound to the worker's id: the per-job lines (``outbox.queue.joblog``)

    def done(self) -> bool:
        """``max_jobs`` started, or ``max_time`` over."""
        c = self.config
        if c.max_jobs is not None and self.started >= c.max_jobs:
            return True
        return self.time_up()

    def time_up(self) -> bool:
        """``max_time`` over: what has not started is handed back (``max_jobs`` lets
        the jobs it counted run)."""
        c = self.config
        return c.max_time is not None and self.clock() - self.began >= c.max_time

    async def pause(self, seconds: float) -> None:
        """Sleep, unless stop is asked first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.stopping.wait()

    def now_ms(self) -> int:
        return int(self.wall_clock() * 1000)


def _jobs_with(registry: Registry, attribute: str) -> list[str]:
    """The names of the registry's jobs whose handler sets ``attribute``, sorted."""
    return sorted(n for n in registry if (h := registry.get(n)) and getattr(h, attribute))


def transactional_jobs(registry: Registry) -> list[str]:
    """The registry's transactional jobs: a broker worker runs them with an inbox."""
    return _jobs_with(registry, "transactional")


def refuse_sql_only(registry: Registry, config: WorkerConfig, database: Database | None) -> None:
    """What a broker worker cannot run: say which, before anything runs.

    A transactional handler needs the database its inbox is in (``outbox.queue.broker.inbox``);
    a dead letter that holds its ordering key cannot be kept (an unacked dead letter would
    block its partition); global concurrency and rate limits are held in the SQL queue's
    tables, and so are kept results (``outbox.results``: written in the SQL
    acknowledgement's transaction).
    """
    names_ = transactional_jobs(registry)
    if names_ and database is None:
        raise ConfigurationError(
            f"job {names_[0]} is transactional, which on a broker needs the database of its "
            "inbox (give --database-url, migrated, or drop transactional=True)"
        )
    held = _jobs_with(registry, "dead_letter_holds_key")
    if held:
        raise ConfigurationError(
            f"job {held[0]} has dead_letter_holds_key=True, which a broker worker cannot keep "
            "(an unacked dead letter would block every key of its partition): drop it or run "
            "without --broker"
        )
    kept = _jobs_with(registry, "keep_result_ms")
    if kept:
        raise ConfigurationError(
            f"job {kept[0]} keeps its result (keep_result), which the SQL queue's "
            "acknowledgement writes: a broker worker would drop it (drop keep_result, for "
            "Django tasks OPTIONS RESULT_TTL None, or run without --broker)"
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


def runner_for(
    registry: Registry, worker_id: str, database: Database | None, hooks: Hooks, system: str
) -> tuple[Runner, InboxRunner | None]:
    """The worker's ``Runner``: with an inbox when a transactional handler runs here (and
    the database given holds it), else one that never opens a database. ``system`` is the
    attempt spans' ``messaging.system``."""
    runner: Runner
    inbox: InboxRunner | None = None
    if database is not None and transactional_jobs(registry):
        runner = inbox = InboxRunner(registry, worker_id, database, hooks)
    else:
        runner = Runner(registry, worker_id, cast(Database, None), hooks)
    runner.system = system
    return runner, inbox
