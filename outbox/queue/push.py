"""push() / push_many(): jobs straight into the queue table, in the caller's transaction.

For work that needs no idempotency key. Atomic with the caller's own writes, like
``record()``; a job is claimable after ``delay`` seconds by the database's clock.
``priority`` (0 most urgent to 9), when given, replaces the job's own. ``push_many`` is
``record_many``'s keyless counterpart: up to 1,000 jobs in one statement.
A job with an ordering key enters its key's line (``outbox.db.ordering``) in the
caller's transaction: it holds the key's row lock until that transaction ends, so two
producers of one key commit one after the other, in the order their jobs run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice
from typing import Any

from outbox.config import settings
from outbox.db import ordering
from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import JobPush, JobsPush, Plan, job_push, jobs_push, run, run_async
from outbox.errors import InvalidJob
from outbox.ids import new_message_id, new_message_ids
from outbox.job import Job, NormalJob, check_priority, normalise, shown
from outbox.tracing import capture

MAX_DELAY_S = 10 * 365 * 86_400
MAX_BATCH = 1_000


def push_params(
    job: NormalJob, message_id: str, delay: object, trace_context: str | None = None
) -> dict[str, Any]:
    """Insert parameters for ``queue_push``; the relay's handoff uses the same columns.
    ``trace_context`` is the caller's span (``outbox.tracing.capture``)."""
    return {
        "message_id": message_id,
        "queue": job.queue,
        "job_name": job.name,
        "payload": job.payload_json,
        "max_attempts": job.max_attempts,
        "delay_ms": delay_ms(delay),
        "priority": job.priority,
        "trace_context": trace_context,
        "ordering_key": job.ordering_key,
    }


def delay_ms(delay: object) -> int:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
        raise InvalidJob(f"delay must be a finite number of seconds (got {shown(delay)})")
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
    params = push_params(_normal(job, priority), new_message_id(), delay, capture())
    target = adapt(conn)
    notify = target.dialect.supports_listen and settings.notify
    return run(_one(JobPush(params, notify)), target, "push")


async def push_async(conn: Any, job: Job, delay: float = 0, *, priority: int | None = None) -> str:
    """``push`` for async connections."""
    params = push_params(_normal(job, priority), new_message_id(), delay, capture())
    target = await adapt_async(conn)
    notify = target.dialect.supports_listen and settings.notify
    return await run_async(_one(JobPush(params, notify)), target, "push")


def push_many(
    conn: Any, jobs: Iterable[Job], delay: float = 0, *, priority: int | None = None
) -> list[str]:
    """Put every job of ``jobs`` in the queue inside ``conn``'s transaction, in one
    statement; return their new message ids in order.

    Each job means what ``push(conn, job, delay, priority=priority)`` means. Every job is
    validated before anything is sent: a bad one raises ``InvalidJob`` naming its index,
    and nothing is written. At most 1,000 jobs per call (one statement must stay a
    bounded size); an empty ``jobs`` returns ``[]`` without touching the connection.
    """
    rows = _batch(jobs, delay, priority)
    if not rows:
        return []
    target = adapt(conn)
    return run(_many(_push(rows, target.dialect.supports_listen)), target, "push_many")


async def push_many_async(
    conn: Any, jobs: Iterable[Job], delay: float = 0, *, priority: int | None = None
) -> list[str]:
    """``push_many`` for async connections."""
    rows = _batch(jobs, delay, priority)
    if not rows:
        return []
    target = await adapt_async(conn)
    plan = _many(_push(rows, target.dialect.supports_listen))
    return await run_async(plan, target, "push_many")


def _one(p: JobPush) -> Plan[str]:
    """``job_push``, entering the job's ordering key's line first when it has one."""
    key = p.row["ordering_key"]
    if key is None:
        return (yield from job_push(p))
    waits = yield from ordering.enter([key])
    message_id = yield from job_push(p)
    if waits[0]:
        yield from ordering.block([message_id])
    return message_id


def _many(p: JobsPush) -> Plan[list[str]]:
    """``jobs_push``, the keyed jobs entering their keys' lines in the given order."""
    keys = [r[ORDERING_KEY] for r in p.rows]
    if all(k is None for k in keys):
        return (yield from jobs_push(p))
    waits = yield from ordering.enter(keys)
    ids = yield from jobs_push(p)
    yield from ordering.block(m for m, w in zip(ids, waits, strict=True) if w)
    return ids


def _push(rows: list[tuple[Any, ...]], listens: bool) -> JobsPush:
    return JobsPush(rows, bool(listens and settings.notify))


# Where a row of ``_batch`` holds the ordering key (the trace context is just before it).
ORDERING_KEY = 8


def _batch(jobs: Iterable[Job], delay: object, priority: int | None) -> list[tuple[Any, ...]]:
    """Every job validated, in order, as ``queue_push_many``'s rows; an error names the
    failing job's index (the delay and priority apply to all, so they are checked once)."""
    ms = delay_ms(delay)
    chosen = None if priority is None else check_priority(priority)
    trace_context = capture()  # one caller, one span: the whole batch shares it
    given = list(islice(jobs, MAX_BATCH + 1))
    ids = new_message_ids(min(len(given), MAX_BATCH))
    rows: list[tuple[Any, ...]] = []
    for index, job in enumerate(given):
        if index >= MAX_BATCH:
            raise InvalidJob(f"push_many takes at most {MAX_BATCH:,} jobs per call")
        try:
            name, queue, payload, attempts, job_priority, ordering_key = _normal(job, chosen)
        except InvalidJob as exc:
            raise InvalidJob(f"item {index}: {exc}") from None
        rows.append(
            (
                ids[index],
                queue,
                name,
                payload,
                attempts,
                ms,
                job_priority,
                trace_context,
                ordering_key,
            )
        )
    return rows
