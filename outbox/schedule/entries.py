"""Periodic jobs as declared: a cron expression in a named timezone, and its ticks.

A *tick* is one instant (UTC) at which a schedule falls due. The scheduler records
each tick through ``record()`` under the key ``schedule:<name>:<tick>``, the tick
written as UTC ISO-8601 (``2026-03-29T01:00:00Z``); that key is what makes a tick run
once however many schedulers record it.

Ticks are cron matches of the *wall clock* in the schedule's timezone (croniter does
the matching on naive wall times), then placed on the UTC timeline by these rules,
so a daylight-saving change neither drops nor repeats a tick::

    wall time exists once       → that instant
    wall time repeated (autumn) → its first occurrence only (fold=0)
    wall time skipped (spring)  → shifted forward by the gap (02:30 → 03:30 CEST);
                                  a tick landing on another tick's instant is one tick

Everything here is pure: no database, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from outbox.errors import ConfigurationError, InvalidJob
from outbox.job import NAME_PATTERN, canonical_json, check_max_attempts

KEY_PREFIX = "schedule:"
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# "schedule:" + name + ":" + a 20-character tick must fit a 200-byte key.
MAX_NAME = 200 - len(KEY_PREFIX) - 1 - 20
# No timezone moves its wall clock by more than this at once; windows of wall times
# are widened by it so a shifted tick is never missed at a window's edge.
_SHIFT = timedelta(hours=3)


@dataclass(frozen=True, slots=True)
class Entry:
    """One periodic job: record ``Job(job, payload, queue)`` at every tick of ``cron``."""

    name: str
    cron: str
    job: str
    queue: str
    payload: Any
    timezone: str
    max_attempts: int | None

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's IANA time zone, in which its cron expression is read."""
        return ZoneInfo(self.timezone)

    def key(self, tick: datetime) -> str:
        """The idempotency key of one tick."""
        return f"{KEY_PREFIX}{self.name}:{tick.astimezone(UTC).strftime(TICK_FORMAT)}"

    def ticks(self, after: datetime, until: datetime) -> list[datetime]:
        """Every tick in ``(after, until]``, UTC, oldest first, each once."""
        zone = self.zone
        start = _wall(after, zone) - _SHIFT
        stop = _wall(until, zone) + _SHIFT
        found = {
            instant
            for wall in _walls_forward(self.cron, start, stop)
            if after < (instant := _place(wall, zone)) <= until
        }
        return sorted(found)

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after``."""
        zone = self.zone
        best: datetime | None = None
        it = croniter(self.cron, _wall(after, zone) - _SHIFT)
        while True:
            wall = it.get_next(datetime)
            instant = _place(wall, zone)
            if instant > after and (best is None or instant < best):
                best = instant
            if best is not None and _wall(best, zone) + _SHIFT < wall:
                return best

    def previous_tick(self, at: datetime) -> datetime | None:
        """The last tick at or before ``at`` (None if the cron never matched before)."""
        zone = self.zone
        best: datetime | None = None
        it = croniter(self.cron, _wall(at, zone) + _SHIFT)
        for _ in range(10_000):
            try:
                wall = it.get_prev(datetime)
            except CroniterError:
                return best
            instant = _place(wall, zone)
            if instant <= at and (best is None or instant > best):
                best = instant
            if best is not None and wall < _wall(best, zone) - _SHIFT:
                return best
        return best


def declare(
    cron: str,
    *,
    name: str,
    job: str | None,
    queue: str,
    payload: Any,
    timezone: str,
    max_attempts: int | None,
) -> Entry:
    """Check every setting of a periodic job now, at declaration, and build its entry."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME:
        raise ConfigurationError(
            f"schedule name {name!r} must be 1-{MAX_NAME} chars of [A-Za-z0-9_.:-]"
        )
    job_name = name if job is None else job
    for what, value in (("job name", job_name), ("queue name", queue)):
        if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
            raise ConfigurationError(
                f"schedule {name!r}: {what} {value!r} must be 1-200 chars of [A-Za-z0-9_.:-]"
            )
    _check_cron(name, cron)
    _check_zone(name, timezone)
    try:
        canonical_json(payload)
        check_max_attempts(max_attempts)
    except InvalidJob as exc:
        raise ConfigurationError(f"schedule {name!r}: {exc}") from None
    return Entry(name, cron, job_name, queue, payload, timezone, max_attempts)


def _check_cron(name: str, cron: object) -> None:
    if not isinstance(cron, str) or not cron.strip():
        raise ConfigurationError(f"schedule {name!r}: the cron expression must be a non-empty str")
    fields = len(cron.split())
    if fields not in (5, 6):  # croniter takes a 7th (year) field; we promise five or six
        raise ConfigurationError(
            f"schedule {name!r}: invalid cron expression {cron!r} ({fields} fields; give five, "
            "or six with seconds last)"
        )
    try:
        # Finding a next match also refuses expressions that never match (Feb 30).
        croniter(cron, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterError, ValueError, KeyError) as exc:
        raise ConfigurationError(
            f"schedule {name!r}: invalid cron expression {cron!r} ({exc.__class__.__name__}: "
            f"{_first_line(exc)})"
        ) from None


def _check_zone(name: str, timezone: object) -> None:
    if not isinstance(timezone, str) or not timezone:
        raise ConfigurationError(f"schedule {name!r}: timezone must be an IANA name, e.g. 'UTC'")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"schedule {name!r}: unknown timezone {timezone!r} (an IANA name, e.g. "
            "'Europe/Berlin'; install the tzdata package if the system has none)"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "rejected"


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock time of ``instant`` in ``zone``."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _place(wall: datetime, zone: ZoneInfo) -> datetime:
    """A naive wall time on the UTC timeline, by the rules in the module docstring.

    ``fold=0`` picks a repeated time's first occurrence; for a skipped time it applies
    the offset from before the jump, which lands it the gap's length later.
    """
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def _walls_forward(cron: str, start: datetime, stop: datetime) -> Iterator[datetime]:
    it = croniter(cron, start)
    while True:
        wall: datetime = it.get_next(datetime)
        if wall > stop:
            return
        yield wall


def parse_tick(text: str) -> datetime:
    """A tick as written in a key, back to an aware UTC datetime."""
    return datetime.strptime(text, TICK_FORMAT).replace(tzinfo=UTC)
