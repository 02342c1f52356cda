"""The handlers' threads and event loop of one SQL worker.

Sync jobs go to their queue's ``SyncPool`` (``cap`` threads taking from its buffer),
async ones to the one ``AsyncPool`` loop; both report on the worker's results queue
(``outbox.queue.execute``). The dispatcher asks here what waits unstarted, takes it back
(a stop, a pause, a stalled queue), and passes on which held jobs an operator cancelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.hooks import Hooks
from outbox.queue.execute import AsyncPool, Runner, SyncPool
from outbox.queue.registry import Registry


class Pools:
    def __init__(
        self,
        registry: Registry,
        worker_id: str,
        database: Database,
        hooks: Hooks,
        caps: dict[str, int],
        results: SimpleQueue[Any],
        stopping: threading.Event,
        began: Callable[[ClaimedJob], None],
        clock: Callable[[], float],
    ) -> None:
        self.registry = registry
        self.runner = Runner(registry, worker_id, database, hooks)
        self.sync = {
            q: SyncPool(q, n, self.runner, results, stopping, began, clock)
            for q, n in caps.items()
        }
        self.async_: AsyncPool | None = None
        if registry.has_async:
            self.async_ = AsyncPool(caps, self.runner, results, stopping, clock)

    def dispatch(self, queue: str, jobs: list[ClaimedJob]) -> list[ClaimedJob]:
        """Start ``jobs`` of ``queue``; return those no handler here knows."""
        to_async, unknown = [], []
        inbox = self.sync[queue].inbox
        for job in jobs:
            handler = self.registry.get(job.job_name)
            if handler is None:
                unknown.append(job)
            elif handler.is_async and self.async_ is not None:
                to_async.append((job, handler))
            else:
                inbox.put((job, handler))
        if to_async and self.async_ is not None:
            self.async_.submit(to_async)
        return unknown

    def waiting(self, queue: str) -> int:
        pool = self.sync.get(queue)
        return 0 if pool is None else pool.waiting()

    def take_waiting(self, queue: str | None = None) -> list[ClaimedJob]:
        """Sync jobs of ``queue`` (None: of every queue) that no thread has started."""
        pools = self.sync.values() if queue is None else [self.sync[queue]]
        return [job for pool in pools for job, _ in pool.drain()]

    def stalled_for(self, queue: str, now: float) -> float:
        return self.sync[queue].stalled_for(now)

    def cancelled(self, job: ClaimedJob) -> bool:
        """Did an operator cancel ``job``? (Asked once, as it settles.)"""
        if job.id not in self.runner.cancelled:
            return False
        self.runner.cancelled.discard(job.id)
        return True

    def cancel(self, job_ids: set[int]) -> None:
        """Held jobs an operator cancelled: handlers see ``ctx.cancelled``, async ones
        are cancelled."""
        new = job_ids - self.runner.cancelled
        self.runner.cancelled.update(new)
        if new and self.async_ is not None:
            self.async_.cancel_jobs(new)

    def release_waiting(self) -> None:
        """A graceful stop: async tasks still waiting for a slot report unstarted."""
        if self.async_ is not None:
            self.async_.release_waiting()

    def close(self, *, cancel_running: bool) -> None:
        if cancel_running and self.async_ is not None:
            self.async_.cancel_all()
        for pool in self.sync.values():
            pool.close()
        if self.async_ is not None:
            self.async_.close()
