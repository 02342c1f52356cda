"""``TaskBackend``: ``django.tasks`` written in the caller's own transaction.

``my_task.enqueue(...)`` inside ``transaction.atomic()`` writes the job on that
transaction's connection: a rollback removes it, a commit makes it run, once. Outside
``atomic()`` the enqueue commits on its own, as Django's other backends do (it opens
its own ``atomic()`` block; inside one it joins it, without a savepoint).

The job is named after the task's module path (``myapp.tasks.send_receipt``), its
payload is ``{"args": [...], "kwargs": {...}}`` as JSON (checked at enqueue: a value
that is not JSON raises Django's own ``TypeError`` before anything is written), and its
handler keeps its result (``outbox.results``), so ``get_result`` answers from any
process. Priorities: Django's -100..100 (higher runs first) map onto outbox's 0..9
(0 runs first) by ``outbox_priority``, order preserved: 100 → 0, 0 → 4, -100 → 9.

The default path is ``push()``: straight into the queue table, no relay needed. Under
``idempotent(key)`` the enqueue goes through ``record()`` instead: one job per key
(enqueueing the same task and arguments again returns the first job's id), handed to
the queue (or a broker such as NATS JetStream) by ``manage.py outbox relay``.

OPTIONS: ``MAX_ATTEMPTS`` (default 1: a failing task is FAILED at once, as Django's
other backends behave; more means retries with backoff) and ``RESULT_TTL`` (seconds a
result is kept, default 7 days; ``manage.py outbox prune`` drops older ones).
"""

from __future__ import annotations

import contextvars
import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from outbox import results
from outbox.contrib.django import conf
from outbox.contrib.django.compat import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    BaseTaskBackend,
    InvalidTaskError,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from outbox.contrib.django.schema import unusable
from outbox.errors import IdempotencyConflict, NoActiveTransaction, OutboxError
from outbox.ids import is_message_id
from outbox.job import MAX_ATTEMPTS_LIMIT, Job
from outbox.queue.push import push
from outbox.record import record

DEFAULT_MAX_ATTEMPTS = 1
# Every task validated in this process, by job name (its module path): the decorator
# validates each one when its module is imported; the worker runs them by this name.
_known: dict[str, Task] = {}
_KEY: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "outbox_django_key", default=None
)


_ORDERING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "outbox_django_ordering", default=None
)


@contextmanager
def ordered(ordering_key: str) -> Iterator[None]:
    """Every ``enqueue`` in this block carries ``ordering_key``: the tasks of one key
    run one at a time, in the order their enqueues commit (``outbox.Job``'s
    ``ordering_key``; a bad key raises ``InvalidJob`` at enqueue, nothing written)."""
    token = _ORDERING.set(ordering_key)
    try:
        yield
    finally:
        _ORDERING.reset(token)


def outbox_priority(django_priority: int) -> int:
    """Django's priority (-100..100, higher first) as outbox's (0..9, lower first)."""
    span = int(TASK_MAX_PRIORITY) - int(TASK_MIN_PRIORITY)
    return (int(TASK_MAX_PRIORITY) - django_priority) * 9 // span


@contextmanager
def idempotent(key: str) -> Iterator[None]:
    """The next ``enqueue`` in this block is recorded under idempotency ``key``.

    One key names one job: a second enqueue in the same block raises ``ValueError``.
    The job is an outbox intent (``record()``) that the relay hands off, so run
    ``manage.py outbox relay`` beside the worker.
    """
    if not isinstance(key, str) or not key:
        raise ValueError("an idempotency key must be a non-empty string")
    token = _KEY.set([key])
    try:
        yield
    finally:
        _KEY.reset(token)


def _take_key() -> str | None:
    held = _KEY.get()
    if held is None:
        return None
    if not held:
        raise ValueError(
            "idempotent(key) names one job: this block already enqueued one under its key"
        )
    return held.pop()


def _json(value: Any) -> Any:
    """Django's JSON rule for arguments (its ``TypeError`` names the bad value)."""
    import json

    return json.loads(json.dumps(value))


class TaskBackend(BaseTaskBackend):
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - {"MAX_ATTEMPTS", "RESULT_TTL"})
        if unknown:
            raise InvalidTaskError(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; "
                "known: MAX_ATTEMPTS, RESULT_TTL"
            )
        self.max_attempts = self.options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidTaskError(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be a whole number from 1 "
                f"to {MAX_ATTEMPTS_LIMIT}"
            )
        self.result_ttl = self.options.get("RESULT_TTL", results.DEFAULT_KEEP_S)
        try:
            results.keep_ms("django task", self.result_ttl)
        except Exception as exc:
            raise InvalidTaskError(f"TASKS[{alias!r}]['OPTIONS']['RESULT_TTL']: {exc}") from None

    # -- enqueue ----------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        _known.setdefault(task.module_path, task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        payload = {"args": _json(list(args)), "kwargs": _json(dict(kwargs))}
        job = Job(
            task.module_path,
            payload,
            queue=task.queue_name,
            max_attempts=self.max_attempts,
            priority=outbox_priority(task.priority),
            ordering_key=_ORDERING.get(),
        )
        key = _take_key()
        alias = conf.alias()
        with _said_under_django(alias), transaction.atomic(using=alias, savepoint=False):
            conn = connections[alias]
            if key is not None:
                at = task.run_after if task.run_after is not None else 0
                message_id = record(conn, key, job, available_at=at)
            else:
                message_id = push(conn, job, _delay_s(task.run_after))
        return self._result(
            task, message_id, TaskResultStatus.READY, payload, enqueued_at=timezone.now()
        )

    # -- results ----------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        if not isinstance(result_id, str) or not is_message_id(result_id):
            raise TaskResultDoesNotExist(result_id)
        with _said_under_django(conf.alias()):
            found = results.get(conf.database(), result_id)
        task = None if found is None else task_named(found.job_name)
        if found is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        payload = found.payload if isinstance(found.payload, dict) else {}
        result = self._result(
            task,
            found.message_id,
            TaskResultStatus(found.status),
            payload,
            enqueued_at=found.enqueued_at,
            started_at=found.started_at,
            finished_at=found.finished_at,
            errors=[
                TaskError(exception_class_path=_class_path(e.exception_class),
                          traceback=e.traceback)
                for e in found.errors
            ],
            # Django counts attempts as worker ids; the last attempt's worker is known.
            worker_ids=found.worker_ids[-1:] * found.attempts if found.worker_ids else [],
        )
        if found.status == results.SUCCESSFUL:
            object.__setattr__(result, "_return_value", found.return_value)
        return result

    def _result(
        self,
        task: Task,
        message_id: str,
        status: Any,
        payload: dict[str, Any],
        *,
        enqueued_at: datetime | None = None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
        errors: list[Any] | None = None,
        worker_ids: list[str] | None = None,
    ) -> TaskResult:
        return TaskResult(
            task=task,
            id=message_id,
            status=status,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
            last_attempted_at=started_at,
            args=list(payload.get("args", [])),
            kwargs=dict(payload.get("kwargs", {})),
            backend=self.alias,
            errors=errors or [],
            worker_ids=worker_ids or [],
        )

    def check(self, **kwargs: Any) -> Any:
        from outbox.contrib.django.checks import backend_checks

        yield from super().check(**kwargs)
        yield from backend_checks(self)


@contextmanager
def _said_under_django(alias: str) -> Iterator[None]:
    """An outbox error that is in truth the alias's missing (or outdated) tables is
    raised again as the same error, saying so and naming ``manage.py migrate``, the
    command that fixes it here (the core's words name ``outbox migrate``). Looked into
    only once something failed, on a connection of our own."""
    try:
        yield
    except OutboxError as exc:
        if isinstance(exc, (ValueError, IdempotencyConflict, NoActiveTransaction)):
            raise
        problem = unusable(alias)
        if problem is None:
            raise
        said = copy.copy(exc)  # its type and attributes (operation, code) kept
        said.args = (problem,)
        raise said from exc


def _class_path(name: str) -> str:
    """outbox names builtins bare (``LookupError``); Django imports the class by path."""
    return name if "." in name else f"builtins.{name}"


def _delay_s(run_after: datetime | None) -> float:
    """``run_after`` as push()'s delay, by this process's clock (never negative)."""
    if run_after is None:
        return 0
    seconds: float = (run_after - timezone.now()).total_seconds()
    return max(0.0, math.ceil(seconds * 1000) / 1000)


def task_named(name: str) -> Task | None:
    """The task whose module path is ``name``: one seen by ``validate_task`` (its module
    was imported), else imported by that path; None when it names no task."""
    known = _known.get(name)
    if known is not None:
        return known
    from django.utils.module_loading import import_string

    try:
        found = import_string(name)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None
