"""Queue control: pause and resume a queue, cancel a job; the limits on ``Snooze``.

A paused queue keeps accepting pushes and handoffs, but no worker claims from it: the
claim statement itself checks ``outbox_paused_queues``, so a pause holds for every worker
from the moment it commits, whatever the workers knew before. Running jobs finish. Jobs a
worker claimed ahead (its prefetch) go back unstarted, attempt refunded, at its next
claim for that queue, which comes when a slot frees up and finds nothing: the worker
then checks the pause (sync handlers' buffers; async handlers' waiting tasks run). A
queue with no
jobs can be paused, and stays paused for the jobs that arrive. A resume wakes idle
workers at once on PostgreSQL (NOTIFY); elsewhere they see it within their poll
interval (``--sleep``).

Cancelling a job no worker holds moves it to the dead letters at once, with exception
class ``cancelled``. A held job is flagged: its worker reads the flag with its next
heartbeat (every third of the lease), sets ``ctx.cancelled`` and cancels an async
handler; whatever the handler then does, the job's acknowledgement records the
cancellation (a dead letter, class ``cancelled``), never a success or a retry. The ack
itself checks the flag, so a job that finishes before its worker learns of the flag is
recorded as cancelled all the same. A flagged job whose worker dies or stops before it
finishes comes back to the queue with the flag; the next worker to hold it records the
cancellation when it finishes.

Each function takes the application's own connection (a SQLAlchemy ``Connection`` or
``Session``, a psycopg 3 ``Connection``, a ``sqlite3.Connection`` or a PyMySQL
``Connection``: the kinds ``record()`` takes, resolved the same way), and then joins its
transaction like ``record()``: the change takes effect when the caller commits, and no
other connection is opened. Or it takes outbox's own ``Connection``
(``Database(url).connect()``), a ``Database`` or a URL, and runs in a transaction of its
own (connecting for the call when given a ``Database`` or URL), retried on deadlock.
Each operation is one plan (``outbox.db.caller``) whichever connection runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from outbox.db import ordering, workflows
from outbox.db.adapters import adapt
from outbox.db.caller import Plan, drive, run
from outbox.db.connection import Connection, Database
from outbox.db.dialect import Dialect
from outbox.db.driver import CANCELLED_FAILURE
from outbox.errors import InvalidJob, MessageNotFound, UnsupportedConnection
from outbox.ids import is_node_id
from outbox.job import check_name
from outbox.queue.admin import check_message_id

# Snoozes per job before the next one dead-letters it (exception class SnoozeLimit).
MAX_SNOOZES = 100
# The longest one snooze may last: a year.
MAX_SNOOZE_SECONDS = 365 * 86_400
SNOOZE_LIMIT = "SnoozeLimit"

# outbox's own Connection, a Database or a URL; or any connection record() accepts.
Target = Connection | Database | str | Any
T = TypeVar("T")
_OURS = "an outbox Database, its Connection or a database URL"


def check_queue_name(queue: object) -> str:
    """``queue`` if it is a queue name, else ``InvalidJob`` naming the rule."""
    return check_name(queue, "queue name")


@contextmanager
def _connected(target: Connection | Database | str) -> Iterator[Connection]:
    if isinstance(target, Connection):
        yield target
        return
    database = Database(target) if isinstance(target, str) else target
    conn = database.connect()
    try:
        yield conn
    finally:
        conn.close()


def call(
    target: Target, plan: Callable[[Dialect], Plan[T]], operation: str, *, reads: bool = False
) -> T:
    """Run ``plan`` on ``target``: in the caller's transaction on an application's
    connection; on our own, in a transaction of ours with the retry policy (outside
    one for a plan that only ``reads``: no writer lock on SQLite)."""
    if not isinstance(target, (Connection, Database, str)):
        try:
            caller = adapt(target)
        except UnsupportedConnection as exc:
            raise UnsupportedConnection(f"{exc}, or {_OURS}") from None
        return run(plan(caller.dialect), caller, operation)
    with _connected(target) as conn:
        run_ours = conn.read if reads else conn.transact
        return run_ours(lambda c: drive(plan(c.dialect), c), operation=operation)


def _wake(dialect: Dialect) -> Plan[None]:
    """Idle workers wake at commit on LISTEN dialects; elsewhere they poll."""
    if dialect.supports_listen:
        yield ("relay_notify", {})


def _pause(queue: str) -> Callable[[Dialect], Plan[bool]]:
    def plan(dialect: Dialect) -> Plan[bool]:
        listed = yield ("queue_paused_list", {})
        if any(row[0] == queue for row in listed):
            return False
        yield ("queue_pause", {"queue": queue})
        yield from _wake(dialect)
        return True

    return plan


def _resume(queue: str) -> Callable[[Dialect], Plan[bool]]:
    def plan(dialect: Dialect) -> Plan[bool]:
        listed = yield ("queue_paused_list", {})
        if not any(row[0] == queue for row in listed):
            return False
        yield ("queue_resume", {"queue": queue})
        yield from _wake(dialect)
        return True

    return plan


def _paused(dialect: Dialect) -> Plan[list[str]]:
    rows = yield ("queue_paused_list", {})
    return sorted(str(row[0]) for row in rows)


def _cancel(message_id: str) -> Callable[[Dialect], Plan[Literal["dead", "flagged"] | None]]:
    key = {"message_id": message_id}

    def plan(dialect: Dialect) -> Plan[Literal["dead", "flagged"] | None]:
        # The key's row is locked before the job's, as on every path (a job entering the
        # key locks in that order; the other order deadlocks on MariaDB).
        keys = ordering.keys_of((yield ("queue_admin_job_key", key)))
        yield from ordering.lock(keys)
        taken = yield ("job_cancel_take", key)
        if taken:
            mid, queue, job_name, payload, attempts, max_attempts, priority, okey = taken[0]
            failure = CANCELLED_FAILURE
            yield (
                "job_dead_insert",
                {
                    "message_id": mid,
                    "queue": queue,
                    "job_name": job_name,
                    "payload": payload,
                    "attempts": attempts,
                    "max_attempts": max_attempts,
                    "priority": priority,
                    "exception_class": failure.exception_class,
                    "exception_message": failure.message,
                    "exception_trace": failure.trace,
                    "ordering_key": okey,
                    "ordering_held": 0,  # an operator's cancellation releases the key
                },
            )
            if is_node_id(str(mid)):  # a workflow node: its dependents, in this transaction
                yield from workflows.failed(str(mid))
            if okey is not None:  # a cancelled job releases its ordering key
                yield from ordering.leave([str(okey)], locked=str(okey) in keys)
            return "dead"
        yield ("job_cancel_flag", key)
        held = yield ("dashboard_job", key)
        return "flagged" if held else None

    return plan


def cancel_plan(message_id: str, dialect: Dialect) -> Plan[Literal["dead", "flagged"] | None]:
    """``cancel``'s plan for one queued job; also what ``outbox.workflows.cancel`` runs
    for each due node (one cancellation, one place)."""
    return _cancel(message_id)(dialect)


def pause(target: Target, queue: str) -> bool:
    """Pause ``queue``: no worker claims from it until ``resume``. Idempotent: returns
    False when it was paused already (nothing changed), as ``resume`` does."""
    return call(target, _pause(check_queue_name(queue)), "queue pause")


def resume(target: Target, queue: str) -> bool:
    """Resume ``queue``; returns False when it was not paused (nothing changed)."""
    return call(target, _resume(check_queue_name(queue)), "queue resume")


def paused(target: Target) -> list[str]:
    """The paused queues, by name."""
    return call(target, _paused, "queue paused", reads=True)


def cancel(target: Target, message_id: str) -> Literal["dead", "flagged"]:
    """Cancel the job ``message_id``: ``"dead"`` when it was waiting (now a dead letter,
    class ``cancelled``), ``"flagged"`` when a worker holds it (see the module
    docstring). ``MessageNotFound`` when no job in the queue has that id."""
    mid = check_message_id(message_id)
    result = call(target, _cancel(mid), "queue cancel")
    if result is None:
        raise MessageNotFound(f"no job in the queue has message id {mid}")
    return result


def snooze_delay_ms(seconds: object) -> int:
    """``Snooze(seconds)`` as milliseconds; ``InvalidJob`` for a value out of range."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds <= MAX_SNOOZE_SECONDS
    ):
        raise InvalidJob(
            f"Snooze(seconds) takes a number from 0 to {MAX_SNOOZE_SECONDS} (got {seconds!r})"
        )
    return round(seconds * 1000)


__all__ = [
    "MAX_SNOOZES",
    "MAX_SNOOZE_SECONDS",
    "SNOOZE_LIMIT",
    "cancel",
    "check_queue_name",
    "pause",
    "paused",
    "resume",
]
