"""The SQL queue: push, claim, acknowledge, release, reap, admin; the worker.

Always imported as ``outbox.queue``: a top-level ``queue`` would shadow the standard
library's module of that name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# ``push`` is also a submodule's name: imported now (see ``outbox/__init__.py``).
from outbox.queue.push import push, push_async, push_many, push_many_async

if TYPE_CHECKING:  # what the names below are; at run time each is imported on first use
    from outbox.queue.backoff import Backoff
    from outbox.queue.context import JobContext
    from outbox.queue.execute import JobTimeout
    from outbox.queue.registry import Registry
    from outbox.queue.worker import Worker, WorkerConfig, WorkerStats

_LAZY = {
    "Backoff": "outbox.queue.backoff",
    "JobContext": "outbox.queue.context",
    "JobTimeout": "outbox.queue.execute",
    "Registry": "outbox.queue.registry",
    "Worker": "outbox.queue.worker",
    "WorkerConfig": "outbox.queue.worker",
    "WorkerStats": "outbox.queue.worker",
}


def __getattr__(name: str) -> Any:
    """``outbox.queue.Worker``: imported on first use. Importing any ``outbox.queue.*``
    module runs this package first, and the CLI's admin commands never need the worker."""
    if name not in _LAZY:
        raise AttributeError(f"module 'outbox.queue' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


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
