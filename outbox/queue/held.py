"""What one worker holds: its claimed jobs per queue, when those with a ``timeout``
began, and the jobs settled at their timeout whose handlers still run.

Only the dispatcher thread changes it, except ``began``, which a handler thread calls as
it starts a job (one dict assignment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from outbox.db.rows import ClaimedJob
from outbox.queue.registry import Registry


class Held:
    def __init__(self, queues: Iterable[str], clock: Callable[[], float]) -> None:
        self._jobs: dict[int, ClaimedJob] = {}
        self._per_queue = dict.fromkeys(queues, 0)
        self._clock = clock
        self._started: dict[int, float] = {}  # job id → began, by the worker's clock
        self._abandoned: set[int] = set()  # settled at their timeout; handler runs on

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[ClaimedJob]:
        return iter(list(self._jobs.values()))

    def count(self, queue: str) -> int:
        return self._per_queue[queue]

    def add(self, queue: str, jobs: Iterable[ClaimedJob]) -> None:
        for job in jobs:
            self._jobs[job.id] = job
            self._per_queue[queue] += 1

    def forget(self, job: ClaimedJob) -> None:
        if self._jobs.pop(job.id, None) is not None:
            self._per_queue[job.queue] -= 1

    def began(self, job: ClaimedJob) -> None:
        """On a handler thread: ``job`` (whose handler has a timeout) starts now."""
        self._started[job.id] = self._clock()

    def running(self) -> bool:
        """Is a job with a timeout running (so the dispatcher must watch the time)?"""
        return bool(self._started)

    def reported(self, job: ClaimedJob) -> bool:
        """An outcome of ``job`` arrived; False if it was settled at its timeout already."""
        self._started.pop(job.id, None)
        if job.id in self._abandoned:
            self._abandoned.discard(job.id)
            return False
        return True

    def overdue(self, now: float, registry: Registry) -> list[tuple[ClaimedJob, float]]:
        """Jobs past their handler's timeout, with it; from now on their outcome is ignored."""
        out: list[tuple[ClaimedJob, float]] = []
        for job_id, began in list(self._started.items()):
            job = self._jobs.get(job_id)
            handler = registry.get(job.job_name) if job else None
            if job is None or handler is None or handler.timeout is None:
                continue
            if now - began >= handler.timeout:
                self._started.pop(job_id, None)
                self._abandoned.add(job_id)
                out.append((job, handler.timeout))
        return out
