"""Retry delays: exponential, fully jittered, capped.

Full jitter (a uniform draw between 0 and the exponential bound) spreads the retries of
jobs that failed together, so a dependency that fell over is not hit by all of them at
the same instant when it comes back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

DEFAULT_BASE_S = 5.0
DEFAULT_CAP_S = 300.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """``delay(attempt)`` in seconds: uniform in ``[0, min(cap, base * 2**(attempt-1))]``.

    ``base`` (default 5 s) and ``cap`` (default 300 s) bound the delay; ``jitter=False``
    returns the bound itself (predictable delays, for tests and demos).
    """

    base: float = DEFAULT_BASE_S
    cap: float = DEFAULT_CAP_S
    jitter: bool = True
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.cap >= self.base):  # NaN fails both, as it should
            raise ValueError(
                f"Backoff needs a number base > 0 and cap >= base, in seconds "
                f"(got base={self.base!r}, cap={self.cap!r})"
            )

    def bound(self, attempt: int) -> float:
        """The largest delay after failed attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt, 1) - 1, 62)
        return float(min(self.cap, self.base * 2.0**exponent))

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``: uniform in ``[0, bound]`` with
        jitter (full jitter), else the bound itself."""
        bound = self.bound(attempt)
        return self.rng.uniform(0.0, bound) if self.jitter else bound

    def delay_ms(self, attempt: int) -> int:
        """``delay(attempt)`` in whole milliseconds, as the queue stores due times."""
        return round(self.delay(attempt) * 1000)


DEFAULT_BACKOFF = Backoff()
