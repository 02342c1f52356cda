"""How many jobs a queue claims ahead of the ones running: fixed, or adaptive.

Prefetching saves round trips: a worker that claims 500 jobs at a time drains a queue
of quick jobs many times faster than one that claims them one by one. It also makes the
claimed jobs wait: behind a slow handler they sit unstarted while other workers could
have run them. The adaptive rule keeps the first without the second:

- It learns each queue's handler run time (an exponentially weighted mean of the jobs it
  ran) and holds at most as many unstarted jobs as its running slots finish in one
  *wait budget*: ``cap * budget / run time``, between ``cap`` and ``MAX_ADAPTIVE``. The
  budget is one handler run time, but never less than ``FAST_WAIT_S`` (quick handlers
  would otherwise round trip for every job). Quick no-op handlers end up claiming
  ``MAX_ADAPTIVE`` at a time; one-second handlers claim ``cap``, one per slot.
- When every slot of a queue has been busy for longer than ``STALL_FACTOR`` run times (a
  job much slower than the rest), the unstarted jobs are handed back, attempt refunded,
  for any worker to take, and the prefetch drops to ``cap`` until run times say
  otherwise. So no job waits unstarted behind a slow one for much longer than a handler's
  usual run time. (Sync handlers; an async queue's waiting tasks follow the sizing rule
  only.)
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ADAPTIVE = 500
START = 10
FAST_WAIT_S = 0.02
STALL_FACTOR = 1.5
_WEIGHT = 0.2  # of the newest run time in the mean


@dataclass(slots=True)
class Prefetch:
    """One queue's prefetch: ``fixed`` when configured, else adapted to run times."""

    cap: int
    fixed: int | None = None
    run_s: float | None = None  # the mean handler run time seen so far
    _value: int = 0

    def __post_init__(self) -> None:
        self._value = self.fixed if self.fixed is not None else max(START, self.cap)

    @property
    def value(self) -> int:
        return self._value

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    def observe(self, ran_s: float) -> None:
        """One handler finished after ``ran_s`` seconds.

        Runs for every job, so the bounds are comparisons rather than ``min``/``max``
        calls (about 0.1 µs each on CPython 3.11, four of them half the cost here):
        ``budget = max(run_s, FAST_WAIT_S)``, ``fits = int(cap * budget / max(run_s,
        1e-6))``, ``value = max(cap, min(MAX_ADAPTIVE, fits))``.
        """
        if self.fixed is not None:
            return
        run_s = ran_s if self.run_s is None else self.run_s + _WEIGHT * (ran_s - self.run_s)
        self.run_s = run_s
        budget = run_s if run_s > FAST_WAIT_S else FAST_WAIT_S
        fits = int(self.cap * budget / (run_s if run_s > 1e-6 else 1e-6))
        bounded = fits if fits < MAX_ADAPTIVE else MAX_ADAPTIVE
        self._value = bounded if bounded > self.cap else self.cap

    def stall_after_s(self) -> float:
        """How long every slot may stay busy before the unstarted jobs go back."""
        return STALL_FACTOR * max(self.run_s or 0.0, FAST_WAIT_S)

    def stalled(self) -> None:
        """Every slot ran long: prefetch one job a slot until run times say otherwise."""
        if self.fixed is None:
            self._value = self.cap
