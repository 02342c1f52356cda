"""A frozen clock that tests move by hand.

``run_pending`` asks it what "now" is: which delayed jobs and retries are due, and
which periodic ticks have passed. It starts one to two seconds ahead of real time, on
a whole second, so a job recorded or pushed with a delay of ``d`` seconds (counted by
the database's clock) within the test's first second is due after ``advance(d)``. For
exact times, record with ``available_at=clock() + d``.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta


class Clock:
    """UNIX seconds that only move when told: ``advance(seconds)`` or ``set(when)``."""

    def __init__(self, start: float | datetime | None = None) -> None:
        self._now = math.ceil(time.time()) + 1.0 if start is None else _seconds(start)
        self.started = self._now
        # Periodic ticks up to here were recorded by run_pending.
        self.ticked_until = self._now

    def __call__(self) -> float:
        return self._now

    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        return datetime.fromtimestamp(self._now, UTC)

    def ms(self) -> int:
        """The clock's time in milliseconds since the UNIX epoch, as the tables store it."""
        return round(self._now * 1000)

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move forward; return the new time. Never backwards (time in tests, as in
        the queue, only grows)."""
        step = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if not step >= 0:
            raise ValueError(f"advance() needs seconds >= 0 (got {seconds!r})")
        self._now += step
        return self.now()

    def set(self, when: float | datetime) -> datetime:
        """Jump to ``when`` (not earlier than now)."""
        target = _seconds(when)
        if target < self._now:
            raise ValueError("the clock never goes backwards")
        self._now = target
        return self.now()

    def __repr__(self) -> str:
        return f"Clock({self.now().isoformat()})"


def _seconds(when: float | datetime) -> float:
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError("the clock needs an aware datetime (it has no time zone)")
        return when.timestamp()
    return float(when)
