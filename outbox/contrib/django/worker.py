"""The registry ``manage.py outbox worker`` runs: every ``django.tasks`` task bound to a
``TaskBackend``, by module path, beside the plain handlers of ``OUTBOX['REGISTRY']``.

``registry`` is built when this module is first imported, in a process where Django is
set up (``manage.py`` did it once): the ``tasks`` module of every installed app is
imported, so every task is known before the first claim. A task runs like a request:
stale or broken database connections are closed before and after it
(``_close_stale``), and it returns its JSON value as the job's result.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils.module_loading import autodiscover_modules

from outbox.contrib.django import backend as task_backend
from outbox.contrib.django import conf
from outbox.contrib.django.compat import Task, TaskContext, TaskResultStatus
from outbox.queue import JobContext, Registry

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
BACKEND_PATH = "outbox.contrib.django.TaskBackend"


def our_backends() -> dict[str, dict[str, Any]]:
    """The ``TASKS`` aliases that use this backend, with their settings."""
    tasks = getattr(settings, "TASKS", {}) or {}
    return {a: p for a, p in tasks.items() if p.get("BACKEND") == BACKEND_PATH}


def handler_for(task: Task, backend: Any) -> Callable[[Any, JobContext], Any]:
    def run(payload: Any, ctx: JobContext) -> Any:
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        _close_stale()
        try:
            if task.takes_context:
                running = backend._result(
                    task, ctx.message_id, TaskResultStatus.RUNNING, payload,
                    enqueued_at=ctx.enqueued_at, worker_ids=[WORKER_ID] * ctx.attempt,
                )
                return task.call(TaskContext(task_result=running), *args, **kwargs)
            return task.call(*args, **kwargs)
        finally:
            _close_stale()

    run.__name__ = run.__qualname__ = task.name
    return run


def _close_stale() -> None:
    """Django's ``close_old_connections``, as its request cycle runs it, except for a
    connection inside ``atomic()`` (``outbox.contrib.django.testing`` runs tasks in the
    test's own transaction, which must stay open)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def build() -> Registry:
    from outbox.contrib.django.compat import task_backends

    autodiscover_modules("tasks")
    registry = Registry()
    plain = conf.registry()
    if plain is not None:
        registry.include(plain)  # the application's, left unchanged
    for name, task in sorted(task_backend._known.items()):
        if task.backend not in our_backends() or name in registry:
            continue
        backend = task_backends[task.backend]
        registry.job(
            name, max_attempts=backend.max_attempts, keep_result=backend.result_ttl
        )(handler_for(task, backend))
    return registry


registry = build()
