"""The ``django.tasks`` API: Django 6's own, or the ``django-tasks`` backport on 5.2.

One import place, so the backend and the user's code differ only in where ``task``
comes from (``django.tasks`` or ``django_tasks``)."""

from __future__ import annotations

try:
    from django.tasks import (  # type: ignore[import-not-found,unused-ignore]
        DEFAULT_TASK_QUEUE_NAME,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import (  # type: ignore[import-not-found,unused-ignore]
        BaseTaskBackend,
    )
    from django.tasks.base import (  # type: ignore[import-not-found,unused-ignore]
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
    )
    from django.tasks.exceptions import (  # type: ignore[import-not-found,unused-ignore]
        InvalidTask as InvalidTaskError,
    )
    from django.tasks.exceptions import (  # type: ignore[import-not-found,unused-ignore]
        TaskResultDoesNotExist,
    )
except ImportError:
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
    )
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
]
