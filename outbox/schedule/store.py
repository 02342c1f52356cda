"""The scheduler's side of the database: record a tick, and find which ticks are recorded.

A tick is recorded by ``record()`` itself, on one of our connections inside
``Connection.transaction()``, under the key ``schedule:<name>:<tick>`` (which only
``scheduler_keys()`` lets through). The key is the whole of the coordination: racing
schedulers all record the same key with the same job, so one intent exists and every
one of them gets its message id back. No table of our own, no lock, no leader.
"""

from __future__ import annotations

import hashlib
import random
import time
from datetime import datetime

from outbox import tracing
from outbox.db.connection import Connection
from outbox.errors import IdempotencyConflict, RetryTransaction
from outbox.job import Job, scheduler_keys
from outbox.log import get_logger
from outbox.record import record
from outbox.schedule.entries import Entry

log = get_logger("outbox.scheduler")

MAX_ATTEMPTS = 4
_PAUSE_S = 0.02


def job_of(entry: Entry) -> Job:
    """The job every tick of ``entry`` records: the same for every scheduler, so the
    same key always carries the same fingerprint."""
    return Job(entry.job, entry.payload, queue=entry.queue, max_attempts=entry.max_attempts)


def record_tick(conn: Connection, entry: Entry, tick: datetime) -> str | None:
    """Record one tick in a transaction of its own; return its message id.

    ``None`` when the key already holds another job (a scheduler running another
    version of this schedule recorded the tick first): logged, not raised, since the
    tick did run once. A deadlock or busy database (``RetryTransaction``) is retried,
    ``MAX_ATTEMPTS`` in all; a ``DatabaseError`` propagates. With tracing on, the tick is
    recorded inside a span of its own (the scheduler has no request to join).
    """
    key, job = entry.key(tick), job_of(entry)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            with scheduler_keys(), tracing.scheduled(entry.name, entry.queue):
                return conn.transact(lambda c: record(c.raw, key, job), operation="schedule")
        except IdempotencyConflict as exc:
            log.warning(
                "schedule.conflict", schedule=entry.name, tick=_iso(tick), holder=exc.message_id
            )
            return None
        except RetryTransaction:
            if attempt == MAX_ATTEMPTS:
                raise
            time.sleep(random.uniform(0, _PAUSE_S * 2**attempt))
    raise AssertionError("unreachable")


def recorded_ticks(conn: Connection, entry: Entry, ticks: list[datetime]) -> dict[datetime, str]:
    """Which of ``ticks`` are recorded (still known by key: until ``outbox prune``)."""
    if not ticks:
        return {}
    by_digest = {_digest(entry.key(t)): t for t in ticks}
    recorded = conn.driver.schedule_keys_recorded(list(by_digest))
    return {by_digest[digest]: message_id for digest, message_id in recorded.items()}


def now(conn: Connection) -> float:
    """The database's clock in UNIX seconds: the scheduler's default clock."""
    return conn.driver.clock_now() / 1000


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def _iso(tick: datetime) -> str:
    return tick.isoformat()
