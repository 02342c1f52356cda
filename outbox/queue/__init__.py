"""The SQL queue: push, claim, acknowledge, release, reap, admin; the worker.

Always imported as ``outbox.queue``: a top-level ``queue`` would shadow the standard
library's module of that name.
"""

from outbox.queue.backoff import Backoff
from outbox.queue.context import JobContext
from outbox.queue.execute import JobTimeout
from outbox.queue.push import push, push_async, push_many, push_many_async
from outbox.queue.registry import Registry
from outbox.queue.worker import Worker, WorkerConfig, WorkerStats

__all__ = [
    "Backoff",
    "JobContext",
    "JobTimeout",
    "Registry",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "push",
    "push_async",
    "push_many",
    "push_many_async",
]
