"""The SQL queue: push, claim, acknowledge, release, reap, admin; the worker.

Always imported as ``outbox.queue``: a top-level ``queue`` would shadow the standard
library's module of that name.
"""

from outbox.queue.push import push, push_async

__all__ = ["push", "push_async"]
