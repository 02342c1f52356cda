"""Queue administration: list, count, requeue and remove jobs and dead letters.

What these return never includes a payload or an exception message, except
``failed_job(message_id)``, which an operator asks for by id. Every id is a message id.
"""

from __future__ import annotations

from outbox.db.connection import Connection
from outbox.db.rows import FailedDetail, FailedRow, JobRow
from outbox.errors import ConfigurationError, InvalidJob, InvalidMessageId
from outbox.ids import is_message_id
from outbox.job import NAME_PATTERN

RETRY_BATCH = 500
MAX_LIMIT = 100_000


def check_message_id(value: str) -> str:
    if not is_message_id(value):
        raise InvalidMessageId(f"{value!r} is not a message id (a UUID like 0191...-...)")
    return value.lower()


def check_queue(value: str | None) -> str | None:
    if value is not None and not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(f"queue name {value!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
    return value


def check_limit(value: int) -> int:
    if not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be from 1 to {MAX_LIMIT}")
    return value


def jobs(conn: Connection, *, queue: str | None = None, limit: int = 50) -> list[JobRow]:
    return conn.driver.queue_jobs(check_queue(queue), check_limit(limit))


def failed(conn: Connection, *, limit: int = 50) -> list[FailedRow]:
    return conn.driver.dead_list(check_limit(limit))


def failed_job(conn: Connection, message_id: str) -> FailedDetail | None:
    return conn.driver.dead_show(check_message_id(message_id))


def retry(conn: Connection, message_id: str) -> int:
    """Requeue one dead letter (attempts reset to 0); return 1, or 0 if there is none."""
    return conn.driver.dead_requeue([check_message_id(message_id)], RETRY_BATCH)


def retry_all(conn: Connection) -> int:
    """Requeue every dead letter, in batches; return how many."""
    total = 0
    while True:
        moved = conn.driver.dead_requeue(None, RETRY_BATCH)
        total += moved
        if moved < RETRY_BATCH:
            return total


def forget(conn: Connection, message_id: str) -> int:
    """Delete one dead letter for good; return how many rows went (0 or 1)."""
    return conn.driver.dead_delete(check_message_id(message_id))


def remove(conn: Connection, message_id: str) -> int:
    """Delete one job from the queue; return how many rows went (0 or 1)."""
    return conn.driver.job_remove(check_message_id(message_id))


def clear(conn: Connection, *, queue: str | None = None) -> int:
    """Delete every job no worker holds (of ``queue``, or all); return how many."""
    return conn.driver.queue_clear(check_queue(queue))


__all__ = [
    "FailedDetail",
    "FailedRow",
    "JobRow",
    "clear",
    "failed",
    "failed_job",
    "forget",
    "jobs",
    "remove",
    "retry",
    "retry_all",
]
