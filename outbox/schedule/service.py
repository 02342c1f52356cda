"""The scheduler service: ``run_once`` records the ticks that fell due; ``watch`` loops.

Each look covers the time since the previous one, per schedule, and records what the
catch-up policy picks of the ticks in it::

    latest (default)  the newest due tick only: a scheduler that was down (or stalled)
                      runs a missed periodic job once, never a flood
    all               every due tick, at most ``max_catch_up`` (the newest)
    none              ticks that fall due while it runs; nothing missed before start

The first look after start reaches back ``catch_up_window`` seconds (``none``: not at
all). Ticks are recorded with keys, so a tick another scheduler already recorded is a
replay that changes nothing: any number of schedulers may run, and each tick is
recorded once. Keep ``catch_up_window`` shorter than the age ``outbox prune`` removes
keys at, or a restart could record a pruned tick again.

The clock is passed in (``clock``, UNIX seconds); by default it is the database's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from outbox.db.connection import Connection, Database, LazyConnection
from outbox.errors import ConfigurationError, DatabaseError
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.queue.registry import Registry
from outbox.schedule import store
from outbox.schedule.entries import Entry

log = get_logger("outbox.scheduler")

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "all", "none")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How a scheduler works. Every field has a default; times are seconds.

    - ``catch_up`` ("latest"): which missed ticks to record (module docstring).
    - ``catch_up_window`` (86,400): how far back the first look after start reaches.
    - ``max_catch_up`` (100): with ``all``, the most ticks one look records per schedule.
    - ``max_sleep`` (60.0): ``watch``'s longest wait between looks, so a changed
      clock is noticed.
    - ``reconnect_max`` (30.0): the longest pause after a database error.
    """

    catch_up: CatchUp = "latest"
    catch_up_window: float = 86_400.0
    max_catch_up: int = 100
    max_sleep: float = 60.0
    reconnect_max: float = 30.0

    def __post_init__(self) -> None:
        if self.catch_up not in CATCH_UP_POLICIES:
            raise ConfigurationError(
                f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)} (got {self.catch_up!r})"
            )
        if not self.catch_up_window >= 0:
            raise ConfigurationError("catch_up_window must be >= 0 seconds")
        if isinstance(self.max_catch_up, bool) or not (
            isinstance(self.max_catch_up, int) and self.max_catch_up >= 1
        ):
            raise ConfigurationError("max_catch_up must be an int >= 1")
        if not (self.max_sleep > 0 and self.reconnect_max > 0):
            raise ConfigurationError("max_sleep and reconnect_max must be > 0")


@dataclass(frozen=True, slots=True)
class Recorded:
    """One tick this look recorded (or found recorded by another scheduler)."""

    schedule: str
    tick: datetime
    message_id: str | None


class Scheduler:
    """Records the due ticks of a registry's periodic jobs. Owns one connection.

    Not thread-safe: give each thread its own ``Scheduler``.
    """

    def __init__(
        self,
        database: Database,
        registry: Registry,
        config: SchedulerConfig | None = None,
        *,
        clock: Callable[[], float] | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.database = database
        self.registry = registry
        self.config = config or SchedulerConfig()
        self._clock = clock
        self.hooks = hooks
        self._conn = LazyConnection(database)
        self._since: dict[str, datetime] = {}

    def now(self) -> datetime:
        seconds = self._clock() if self._clock is not None else store.now(self._conn.get())
        return datetime.fromtimestamp(seconds, UTC)

    def run_once(self, now: datetime | None = None) -> list[Recorded]:
        """Record what fell due since the last look (policy permitting); return it.

        A ``DatabaseError`` propagates after dropping the connection; the ticks it
        concerned stay due for the next look.
        """
        at = self.now() if now is None else now
        done: list[Recorded] = []
        try:
            for entry in self.registry.schedules:
                done.extend(self._look(entry, at))
        except DatabaseError:
            self._conn.drop()
            raise
        self.hooks.scheduler_tick(len(done))
        return done

    def _look(self, entry: Entry, at: datetime) -> list[Recorded]:
        since = self._since.get(entry.name)
        if since is None:
            if self.config.catch_up == "none":
                self._since[entry.name] = at
                return []
            since = at - timedelta(seconds=self.config.catch_up_window)
        due = entry.ticks(since, at)
        keep = self.config.max_catch_up if self.config.catch_up == "all" else 1
        chosen = due[-keep:]
        if len(due) > len(chosen):
            log.info("schedule.skipped", schedule=entry.name, missed=len(due) - len(chosen))
        done = []
        for tick in chosen:
            message_id = store.record_tick(self._conn.get(), entry, tick)
            done.append(Recorded(entry.name, tick, message_id))
            log.info("schedule.tick", schedule=entry.name, tick=tick.isoformat(), job=entry.job)
        self._since[entry.name] = max(at, since)
        return done

    def seconds_to_next(self, now: datetime) -> float:
        """How long until the next tick of any schedule (at most ``max_sleep``)."""
        wait = self.config.max_sleep
        for entry in self.registry.schedules:
            wait = min(wait, (entry.next_tick(now) - now).total_seconds())
        return max(wait, 0.0)

    def watch(self, stop: threading.Event) -> int:
        """Look at every tick until ``stop`` is set; return how many ticks it recorded."""
        total = 0
        failing = self.config.max_sleep / 60
        log.info("scheduler.watch", schedules=len(self.registry.schedules))
        try:
            while not stop.is_set():
                try:
                    total += len(self.run_once())
                    wait = self.seconds_to_next(self.now()) + 0.005
                    failing = self.config.max_sleep / 60
                except DatabaseError as exc:
                    log.warning("scheduler.look_failed", error=type(exc.__cause__ or exc).__name__)
                    self._conn.drop()
                    wait, failing = failing, min(failing * 2, self.config.reconnect_max)
                stop.wait(wait)
        finally:
            self.close()
            log.info("scheduler.stopped", recorded=total)
        return total

    def close(self) -> None:
        self._conn.drop()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status(
    conn: Connection, registry: Registry, now: datetime, recent: int = 50
) -> list[dict[str, object]]:
    """Each schedule with its next tick and its last recorded one (among the ``recent``
    latest ticks; older ones are not searched)."""
    out: list[dict[str, object]] = []
    for entry in registry.schedules:
        ticks = recent_ticks(entry, now, recent)
        recorded = store.recorded_ticks(conn, entry, ticks)
        last = max(recorded) if recorded else None
        out.append(
            {
                "name": entry.name,
                "cron": entry.cron,
                "timezone": entry.timezone,
                "job": entry.job,
                "queue": entry.queue,
                "last_tick": last,
                "last_message_id": recorded.get(last) if last else None,
                "next_tick": entry.next_tick(now),
            }
        )
    return out


def recent_ticks(entry: Entry, now: datetime, count: int) -> list[datetime]:
    """The ``count`` latest ticks at or before ``now``, newest first."""
    out: list[datetime] = []
    at = now
    while len(out) < count:
        tick = entry.previous_tick(at)
        if tick is None:
            break
        out.append(tick)
        at = tick - timedelta(microseconds=1)
    return out
