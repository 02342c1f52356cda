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

Each function takes an open ``Connection`` (``Database(url).connect()``), or a
``Database`` or a URL, which it connects to for the call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from outbox.db.connection import Connection, Database
from outbox.errors import InvalidJob, MessageNotFound
from outbox.job import check_name
from outbox.queue.admin import check_message_id

# Snoozes per job before the next one dead-letters it (exception class SnoozeLimit).
MAX_SNOOZES = 100
# The longest one snooze may last: a year.
MAX_SNOOZE_SECONDS = 365 * 86_400
SNOOZE_LIMIT = "SnoozeLimit"

Target = Connection | Database | str


def check_queue_name(queue: object) -> str:
    """``queue`` if it is a queue name, else ``InvalidJob`` naming the rule."""
    return check_name(queue, "queue name")


@contextmanager
def _connected(target: Target) -> Iterator[Connection]:
    if isinstance(target, Connection):
        yield target
        return
    database = Database(target) if isinstance(target, str) else target
    conn = database.connect()
    try:
        yield conn
    finally:
        conn.close()


def pause(target: Target, queue: str) -> None:
    """Pause ``queue``: no worker claims from it until ``resume``. Idempotent."""
    name = check_queue_name(queue)
    with _connected(target) as conn:
        conn.driver.queue_pause(name)


def resume(target: Target, queue: str) -> bool:
    """Resume ``queue``; returns False when it was not paused (nothing changed)."""
    name = check_queue_name(queue)
    with _connected(target) as conn:
        return conn.driver.queue_resume(name)


def paused(target: Target) -> list[str]:
    """The paused queues, by name."""
    with _connected(target) as conn:
        return sorted(conn.driver.queue_paused())


def cancel(target: Target, message_id: str) -> Literal["dead", "flagged"]:
    """Cancel the job ``message_id``: ``"dead"`` when it was waiting (now a dead letter,
    class ``cancelled``), ``"flagged"`` when a worker holds it (see the module
    docstring). ``MessageNotFound`` when no job in the queue has that id."""
    mid = check_message_id(message_id)
    with _connected(target) as conn:
        result = conn.driver.job_cancel(mid)
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
