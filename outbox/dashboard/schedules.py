"""The Schedules page's read: each periodic job with its next ticks and its last run.

The scheduler keeps no table (``outbox.schedule.store``): a tick is an intent recorded
under the key ``schedule:<name>:<tick>``, and the schedules themselves live in the
application's ``Registry``. So the page needs that registry (``outbox dashboard --app``),
and reads what ``outbox schedule list`` reads: the last recorded tick among the latest
``RECENT`` ticks, found by key in ``outbox_keys``. What became of that tick's job is
then looked up by its message id, where it is now::

    pending / quarantined   still in the outbox (the relay has not handed it off)
    queued / running        in the queue, unheld / held by a worker
    dead-lettered           out of attempts
    left the queue          none of those: it ran and succeeded (or was removed)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from outbox.dashboard import store
from outbox.db.connection import Connection
from outbox.queue import admin as queue_admin
from outbox.queue.registry import Registry
from outbox.schedule import store as schedule_store
from outbox.schedule.entries import Entry
from outbox.schedule.service import recent_ticks

RECENT = 50  # as `outbox schedule list`
NEXT_TICKS = 3


@dataclass(frozen=True, slots=True)
class LastRun:
    tick: datetime
    message_id: str
    state: str  # see the module docstring


@dataclass(frozen=True, slots=True)
class Schedule:
    entry: Entry
    next_ticks: list[datetime]
    last: LastRun | None


def read(conn: Connection, registry: Registry) -> tuple[datetime, list[Schedule]]:
    """The database's time and every schedule of ``registry``, in registration order."""
    now = datetime.fromtimestamp(schedule_store.now(conn), UTC)
    return now, [_schedule(conn, entry, now) for entry in registry.schedules]


def _schedule(conn: Connection, entry: Entry, now: datetime) -> Schedule:
    ticks = [entry.next_tick(now)]
    while len(ticks) < NEXT_TICKS:
        ticks.append(entry.next_tick(ticks[-1]))
    recorded = schedule_store.recorded_ticks(conn, entry, recent_ticks(entry, now, RECENT))
    if not recorded:
        return Schedule(entry, ticks, None)
    tick = max(recorded)
    message_id = recorded[tick]
    return Schedule(entry, ticks, LastRun(tick, message_id, state_of(conn, message_id)))


def state_of(conn: Connection, message_id: str) -> str:
    """Where the message is now, in the words of the module docstring."""
    job = store.job(conn, message_id)
    if job is not None:
        return "running" if job.reserved_by else "queued"
    if queue_admin.failed_job(conn, message_id) is not None:
        return "dead-lettered"
    intent = store.intent(conn, message_id)
    if intent is not None:
        return "quarantined" if intent.state == "failed" else "pending"
    return "left the queue"
