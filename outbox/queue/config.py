"""The worker's settings (``WorkerConfig``) and what a run did (``WorkerStats``)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from outbox.errors import ConfigurationError
from outbox.job import NAME_PATTERN, shown


def new_worker_id() -> str:
    """Host, pid and a random part: unique to this process's lifetime, never reused."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{secrets.token_hex(6)}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a worker runs. Every field has a default.

    - ``queues``: queue name → concurrency cap (``None``: ``concurrency``). Default
      ``{"default": None}``.
    - ``concurrency`` (1): the cap of queues given without one.
    - ``prefetch`` (None: adaptive, see ``outbox.queue.prefetch``): jobs claimed per round
      trip and held beyond those running; a number fixes it.
    - ``lease`` (30 s): how long a claim lasts without a heartbeat; beats every third.
    - ``sleep`` (1 s): idle poll interval (PostgreSQL also wakes on NOTIFY).
    - ``stop_when_empty`` (False): exit when nothing is claimable now.
    - ``max_jobs`` / ``max_time`` (None): stop claiming after that many jobs / seconds.
    - ``grace`` (30 s): how long a graceful stop waits for running jobs.
    - ``reap_every`` (None: half the lease): the reaper's period.
    - ``listen`` (True): use LISTEN/NOTIFY where the database has it.
    - ``queue_limits`` (none): queue name → how many of its jobs may run at once across
      every worker (``outbox.queue.gate``), beside each worker's own cap.
    - ``unknown_job_delay`` (60 s): when a claimed job's name has no handler here (another
      worker's registry, a rolling deploy), it goes back, attempt refunded, due again
      after this many seconds, for a worker that knows it.
    """

    queues: dict[str, int | None] = field(default_factory=lambda: {"default": None})
    concurrency: int = 1
    prefetch: int | None = None
    lease: float = 30.0
    sleep: float = 1.0
    stop_when_empty: bool = False
    max_jobs: int | None = None
    max_time: float | None = None
    grace: float = 30.0
    reap_every: float | None = None
    listen: bool = True
    queue_limits: dict[str, int] = field(default_factory=dict)
    unknown_job_delay: float = 60.0

    def caps(self) -> dict[str, int]:
        """Each queue's concurrency in this worker: its own cap, else ``concurrency``."""
        return {q: (n or self.concurrency) for q, n in self.queues.items()}

    def check(self) -> None:
        """Raise ``ConfigurationError`` naming the first setting that is out of range (a
        queue name, a cap, a limit); the worker calls it before it starts."""
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue")
        for q, n in self.queues.items():
            if not NAME_PATTERN.fullmatch(q):
                raise ConfigurationError(f"queue name {q!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
            if n is not None:
                _whole(f"queue {q!r}: the concurrency cap", n)
        for q, n in self.queue_limits.items():
            if not NAME_PATTERN.fullmatch(q):
                raise ConfigurationError(f"queue name {q!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
            if q not in self.queues:
                raise ConfigurationError(f"queue_limits: {q!r} is not one of the worker's queues")
            _whole(f"queue {q!r}: the global limit", n)
        _whole("concurrency", self.concurrency)
        for name, count in (("prefetch", self.prefetch), ("max_jobs", self.max_jobs)):
            if count is not None:
                _whole(name, count)
        _seconds("lease", self.lease, least=0.3)
        _seconds("sleep", self.sleep, above=0)
        _seconds("grace", self.grace, least=0)
        for name, period in (("max_time", self.max_time), ("reap_every", self.reap_every)):
            if period is not None:
                _seconds(name, period, above=0, infinite=name == "max_time")
        _seconds("unknown_job_delay", self.unknown_job_delay, least=0, most=86_400)
        for name, flag in (("stop_when_empty", self.stop_when_empty), ("listen", self.listen)):
            if not isinstance(flag, bool):
                raise ConfigurationError(f"{name} must be True or False (got {shown(flag)})")


def _whole(name: str, value: object) -> None:
    """A count: an int (not a bool) of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1 (got {shown(value)})")


def _seconds(
    name: str,
    value: object,
    *,
    least: float | None = None,
    above: float | None = None,
    most: float | None = None,
    infinite: bool = False,
) -> None:
    """A duration in seconds: a real number (not a bool), finite unless ``infinite``
    (NaN never), within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigurationError(f"{name} must be a number of seconds (got {shown(value)})")
    if not infinite and value in (float("inf"), float("-inf")):
        raise ConfigurationError(f"{name} must be a finite number of seconds (got {shown(value)})")
    if (
        (least is not None and value < least)
        or (above is not None and value <= above)
        or (most is not None and value > most)
    ):
        bounds = " and ".join(
            b
            for b in (
                None if least is None else f">= {least}",
                None if above is None else f"> {above}",
                None if most is None else f"<= {most}",
            )
            if b
        )
        raise ConfigurationError(f"{name} must be {bounds} seconds (got {shown(value)})")


@dataclass(slots=True)
class WorkerStats:
    """What one run did. ``retried``: failed attempts sent back with backoff;
    ``snoozed``: jobs sent back by ``outbox.Snooze`` (no attempt spent); ``cancelled``:
    held jobs an operator cancelled, recorded as dead letters."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    unknown: int = 0
    lost: int = 0
    timed_out: int = 0
    deferred: int = 0  # claimed over a global limit and handed back unspent
    reaped: int = 0
    snoozed: int = 0
    cancelled: int = 0
    graceful: bool = True

    @property
    def finished(self) -> int:
        """Jobs this worker settled: succeeded, released for a retry, or dead-lettered."""
        return self.succeeded + self.retried + self.dead
