"""Scheduler processes for the racing tests: each one steps an injected clock through a
simulated day and records what falls due, as `outbox scheduler` would."""

from __future__ import annotations

import hashlib
import logging
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from outbox import Registry
from outbox.db.connection import Database
from outbox.schedule.service import Scheduler, SchedulerConfig

DAY = datetime(2026, 3, 29, tzinfo=UTC)  # Europe/Berlin springs forward this day


def day_registry() -> Registry:
    registry = Registry()
    registry.schedule("*/10 * * * *", name="race.every10", job="race.noop")
    registry.schedule("0 * * * *", name="race.hourly", job="race.noop", payload={"k": "h"})
    registry.schedule("*/20 * * * *", name="race.berlin", job="race.noop", timezone="Europe/Berlin")
    return registry


def expected_keys() -> set[str]:
    """Every tick of the simulated day (the clock starts at midnight: that tick is out)."""
    keys = set()
    for entry in day_registry().schedules:
        keys |= {entry.key(t) for t in entry.ticks(DAY, DAY + timedelta(days=1))}
    return keys


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("ascii")).hexdigest()


class SteppedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at.timestamp()


def race_one_day(url: str, seed: int, start: Any, results: Any) -> None:
    """Step through the day in random strides of 1-7 minutes, recording every due tick."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rng = random.Random(seed)
    clock = SteppedClock(DAY)
    # Every tick in the day (a stride can pass several), nothing before it.
    config = SchedulerConfig(catch_up="all", catch_up_window=0)
    seen: dict[str, str | None] = {}
    registry = day_registry()
    start.wait(60)
    with Scheduler(Database(url), registry, config, clock=clock) as scheduler:
        scheduler.run_once()
        while clock.at < DAY + timedelta(days=1):
            clock.at = min(clock.at + timedelta(minutes=rng.randint(1, 7)), DAY + timedelta(days=1))
            for done in scheduler.run_once():
                entry = registry.schedules.get(done.schedule)
                seen[digest(entry.key(done.tick))] = done.message_id
    results.put(seen)
