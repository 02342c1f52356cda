"""push(): a job straight into the queue table, in the caller's transaction.

For work that needs no idempotency key. Atomic with the caller's own writes, like
``record()``; the job is claimable after ``delay`` seconds by the database's clock.
``priority`` (0 most urgent to 9), when given, replaces the job's own.
"""

from __future__ import annotations

import math
from typing import Any

from outbox.config import settings
from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import JobPush, job_push, run, run_async
from outbox.errors import InvalidJob
from outbox.ids import new_message_id
from outbox.job import Job, NormalJob, check_priority, normalise

MAX_DELAY_S = 10 * 365 * 86_400


def push_params(job: NormalJob, message_id: str, delay: object) -> dict[str, Any]:
    """Insert parameters for ``queue_push``; the relay's handoff uses the same columns."""
    return {
        "message_id": message_id,
        "queue": job.queue,
        "job_name": job.name,
        "payload": job.payload_json,
        "max_attempts": job.max_attempts,
        "delay_ms": delay_ms(delay),
        "priority": job.priority,
    }


def delay_ms(delay: object) -> int:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
        raise InvalidJob(f"delay must be a finite number of seconds (got {type(delay).__name__})")
    if not 0 <= delay <= MAX_DELAY_S:
        raise InvalidJob(f"delay must be between 0 and {MAX_DELAY_S} seconds")
    return round(delay * 1000)


def _normal(job: Job, priority: int | None) -> NormalJob:
    normal = normalise(job)
    if priority is None:
        return normal
    return normal._replace(priority=check_priority(priority))


def push(conn: Any, job: Job, delay: float = 0, *, priority: int | None = None) -> str:
    """Put ``job`` in the queue inside ``conn``'s transaction; return its new message id.

    ``priority`` (0 most urgent to 9) replaces ``job.priority`` when given; out of range
    raises ``InvalidJob`` before anything is written.
    """
    params = push_params(_normal(job, priority), new_message_id(), delay)
    target = adapt(conn)
    notify = target.dialect.supports_listen and settings.notify
    return run(job_push(JobPush(params, notify), target.dialect), target, "push")


async def push_async(
    conn: Any, job: Job, delay: float = 0, *, priority: int | None = None
) -> str:
    """``push`` for async connections."""
    params = push_params(_normal(job, priority), new_message_id(), delay)
    target = await adapt_async(conn)
    notify = target.dialect.supports_listen and settings.notify
    return await run_async(job_push(JobPush(params, notify), target.dialect), target, "push")
