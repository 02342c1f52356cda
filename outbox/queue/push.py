"""push(): a job straight into the queue table, in the caller's transaction.

For work that needs no idempotency key. Atomic with the caller's own writes, like
``record()``; the job is claimable after ``delay`` seconds by the database's clock.
"""

from __future__ import annotations

import math
from typing import Any

from outbox.config import settings
from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import JobPush, job_push, run, run_async
from outbox.errors import InvalidJob
from outbox.ids import new_message_id
from outbox.job import Job, NormalJob, normalise

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
    }


def delay_ms(delay: object) -> int:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
        raise InvalidJob(f"delay must be a finite number of seconds (got {type(delay).__name__})")
    if not 0 <= delay <= MAX_DELAY_S:
        raise InvalidJob(f"delay must be between 0 and {MAX_DELAY_S} seconds")
    return round(delay * 1000)


def push(conn: Any, job: Job, delay: float = 0) -> str:
    """Put ``job`` in the queue inside ``conn``'s transaction; return its new message id."""
    params = push_params(normalise(job), new_message_id(), delay)
    target = adapt(conn)
    notify = target.dialect.supports_listen and settings.notify
    return run(job_push(JobPush(params, notify), target.dialect), target, "push")


async def push_async(conn: Any, job: Job, delay: float = 0) -> str:
    """``push`` for async connections."""
    params = push_params(normalise(job), new_message_id(), delay)
    target = await adapt_async(conn)
    notify = target.dialect.supports_listen and settings.notify
    return await run_async(job_push(JobPush(params, notify), target.dialect), target, "push")
