"""What a job name's global limits are: ``concurrency``, ``concurrency_key`` and ``rate``.

``@registry.job("sync.account", concurrency=2, concurrency_key=fn, rate="100/m")``
declares them; ``outbox.queue.options`` checks them at registration and ``Limits``
carries them. ``outbox.queue.gate`` enforces them across every worker.

A rate is ``"N/s"``, ``"N/m"`` or ``"N/h"``: at most N starts in any sliding window of a
second, minute or hour. When ``concurrency_key`` is given, both limits hold per value of
the key (``concurrency_key(payload)``, a str or an int); otherwise per job name.

``prune`` (run by ``outbox prune``) deletes the bookkeeping of keys no longer in use.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outbox.errors import ConfigurationError

if TYPE_CHECKING:
    from outbox.db.driver import Driver

WINDOW_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}
MAX_RATE = 1_000_000
_RATE = re.compile(r"(\d{1,7})/([smh])")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of ``window_ms``."""

    count: int
    window_ms: int

    def __str__(self) -> str:
        unit = next(u for u, ms in WINDOW_MS.items() if ms == self.window_ms)
        return f"{self.count}/{unit}"


def parse_rate(name: str, rate: object) -> Rate:
    """``"100/m"`` → ``Rate(100, 60_000)``; anything else raises ``ConfigurationError``
    naming the job and the value."""
    match = _RATE.fullmatch(rate) if isinstance(rate, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_RATE:
        raise ConfigurationError(
            f"job {name!r}: rate {rate!r} is not a rate; write N/s, N/m or N/h with N a "
            f'whole number from 1 to {MAX_RATE:,} (e.g. rate="100/m")'
        )
    return Rate(int(match.group(1)), WINDOW_MS[match.group(2)])


@dataclass(frozen=True, slots=True)
class Limits:
    """One job name's limits; ``key`` maps a payload to the value they hold per."""

    concurrency: int | None = None
    rate: Rate | None = None
    key: Callable[[Any], Any] | None = None

    def __bool__(self) -> bool:
        return self.concurrency is not None or self.rate is not None


def prune(driver: Driver) -> int:
    """Delete limit bookkeeping older than the longest window (an hour) that no admission
    will read again, and the keys left idle; how many keys went."""
    return driver.limit_prune(max(WINDOW_MS.values()))
