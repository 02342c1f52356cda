"""The Schedules page's read: each periodic job with its next ticks and its last run.

The scheduler keeps no table (``outbox.schedule.store``): a tick is an intent recorded
under the key ``schedule:<name>:<tick>``, and the schedules themselves live in the
application's ``Registry``. So the page needs that registry (``outbox dashboard --app``),
and reads what ``outbox schedule list`` reads: the last recorded tick among the latest
``RECENT`` ticks (within ``LOOKBACK``), found by key in ``outbox_keys``. What became of
that tick's job is then looked up by its message id, where it is now::

    pending / quarantined   still in the outbox (the relay has not handed it off)
    queued / running        in the queue, unheld / held by a worker
    dead-lettered           out of attempts
    left the queue          none of those: it ran and succeeded (or was removed)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from outbox.dashboard import store
from outbox.db.connection import Connection
from outbox.queue import admin as queue_admin
from outbox.queue.registry import Registry
from outbox.schedule import store as schedule_store
from outbox.schedule.entries import Entry

RECENT = 50  # as `outbox schedule list`
LOOKBACK = timedelta(days=400)
NEXT_TICKS = 3
LOOKAHEAD = timedelta(days=366 * 30)
FIRST_SPAN = timedelta(minutes=15)


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
    ticks, recent = _around(entry, now)
    recorded = schedule_store.recorded_ticks(conn, entry, recent)
    if not recorded:
        return Schedule(entry, ticks, None)
    tick = max(recorded)
    message_id = recorded[tick]
    return Schedule(entry, ticks, LastRun(tick, message_id, state_of(conn, message_id)))


_Around = tuple[list[datetime], list[datetime]]
_around_cache: dict[tuple[str, str, str], tuple[datetime, _Around]] = {}


def _around(entry: Entry, now: datetime) -> _Around:
    """The next ticks and the recent ones (nearest first). Kept until the next tick
    passes: the schedule's ticks are the same until then, and working them out is the
    page's main cost (milliseconds per schedule)."""
    key = (entry.name, entry.cron, entry.timezone)
    cached = _around_cache.get(key)
    if cached is not None and cached[0] <= now and (not cached[1][0] or now < cached[1][0][0]):
        return cached[1]
    ticks = _ticks(entry, now, NEXT_TICKS, LOOKAHEAD, FIRST_SPAN, forward=True)
    # The next ticks' spacing says how far back the recent ones reach: one walk, mostly.
    gap = (ticks[-1] - ticks[0]) / max(len(ticks) - 1, 1) if ticks else FIRST_SPAN
    recent = _ticks(entry, now, RECENT, LOOKBACK, max(gap * RECENT * 1.25, FIRST_SPAN),
                    forward=False)
    _around_cache[key] = (now, (ticks, recent))
    return ticks, recent


def _ticks(
    entry: Entry, now: datetime, count: int, limit: timedelta, first: timedelta, *,
    forward: bool,
) -> list[datetime]:
    """The ``count`` ticks nearest ``now`` after it (``forward``) or at or before it,
    nearest first, looking at most ``limit`` away (``first``: the first window's length).

    One forward walk over a window that grows fourfold until it holds ``count`` ticks:
    stepping tick by tick (``Entry.previous_tick``, as ``outbox schedule list`` does)
    re-walks the daylight-saving margin for every tick, which for an every-minute
    schedule costs about 9 ms a tick, and a page of twenty schedules seconds.
    """
    span = min(first, limit)
    while True:
        found = entry.ticks(now, now + span) if forward else entry.ticks(now - span, now)[::-1]
        if len(found) >= count or span >= limit:
            return found[:count]
        span = min(span * 4, limit)


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
