"""The worker's settings (``WorkerConfig``) and what a run did (``WorkerStats``)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from outbox.errors import ConfigurationError
from outbox.job import NAME_PATTERN


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
            if n is not None and n < 1:
                raise ConfigurationError(f"queue {q!r}: the concurrency cap must be at least 1")
        for q, n in self.queue_limits.items():
            if not NAME_PATTERN.fullmatch(q):
                raise ConfigurationError(f"queue name {q!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
            if q not in self.queues:
                raise ConfigurationError(f"queue_limits: {q!r} is not one of the worker's queues")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigurationError(
                    f"queue {q!r}: the global limit must be a whole number >= 1"
                )
        if self.concurrency < 1 or (self.prefetch is not None and self.prefetch < 1):
            raise ConfigurationError("concurrency and prefetch must be at least 1")
        if self.lease < 0.3 or self.sleep <= 0 or self.grace < 0:
            raise ConfigurationError("lease must be >= 0.3 s, sleep > 0 and grace >= 0")
        if not 0 <= self.unknown_job_delay <= 86_400:  # NaN fails too
            raise ConfigurationError("unknown_job_delay must be from 0 to 86400 seconds")


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
