"""Periodic job declarations and their ticks: pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from outbox import Registry
from outbox.errors import ConfigurationError, InvalidKey
from outbox.job import key_digest, scheduler_keys
from outbox.schedule.entries import Entry, parse_tick


def _entry(cron: str, tz: str = "UTC", name: str = "t.periodic") -> Entry:
    registry = Registry()
    registry.schedule(cron, name=name, timezone=tz)
    entry = registry.schedules.get(name)
    assert entry is not None
    return entry


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_periodic_registers_the_handler_and_the_schedule() -> None:
    registry = Registry()

    @registry.periodic("0 * * * *", name="reports.hourly", queue="reports", payload={"k": 1})
    def hourly(payload: object, ctx: object) -> None: ...

    entry = registry.schedules.get("reports.hourly")
    assert "reports.hourly" in registry
    assert entry is not None and (entry.job, entry.queue, entry.payload) == (
        "reports.hourly",
        "reports",
        {"k": 1},
    )
    assert entry.timezone == "UTC"


def test_schedule_names_a_job_handled_elsewhere() -> None:
    registry = Registry()
    registry.schedule("*/5 * * * *", name="billing.sweep", job="billing.run", queue="billing")
    entry = registry.schedules.get("billing.sweep")
    assert entry is not None and entry.job == "billing.run"
    assert "billing.run" not in registry  # no handler here, on purpose


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("61 * * * *", "out of range"),
        ("* * *", "invalid cron expression"),
        ("every monday", "invalid cron expression"),
        ("", "non-empty"),
        ("0 0 30 2 *", "failed to find next date"),  # February 30th never comes
    ],
)
def test_an_invalid_cron_expression_fails_at_declaration(cron: str, why: str) -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError, match=why) as err:

        @registry.periodic(cron, name="t.bad")
        def bad(payload: object, ctx: object) -> None: ...

    assert "t.bad" in str(err.value)
    assert "t.bad" not in registry and len(registry.schedules) == 0  # nothing half registered


def test_a_duplicate_name_fails_at_declaration_and_keeps_the_first() -> None:
    registry = Registry()
    registry.schedule("0 * * * *", name="t.dup", payload=1)
    with pytest.raises(ConfigurationError, match=r"'t\.dup' is already declared"):
        registry.schedule("*/5 * * * *", name="t.dup", payload=2)
    with pytest.raises(ConfigurationError, match="already declared"):

        @registry.periodic("*/5 * * * *", name="t.dup")
        def dup(payload: object, ctx: object) -> None: ...

    entry = registry.schedules.get("t.dup")
    assert entry is not None and entry.payload == 1 and "t.dup" not in registry


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"timezone": ""}, "IANA name"),
        ({"name": "x" * 171}, "1-170 chars"),
        ({"name": "has space"}, "schedule name"),
        ({"queue": "no/slash"}, "queue name"),
        ({"job": ""}, "job name"),
        ({"payload": {1: "x"}}, "object keys must be strings"),
        ({"payload": float("nan")}, "NaN"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_every_setting_is_checked_at_declaration(kwargs: dict[str, object], why: str) -> None:
    settings: dict[str, object] = {"name": "t.periodic", **kwargs}
    with pytest.raises(ConfigurationError, match=why):
        Registry().schedule("0 * * * *", **settings)  # type: ignore[arg-type]


def test_ticks_are_utc_and_keys_are_iso_8601() -> None:
    entry = _entry("*/15 * * * *")
    ticks = entry.ticks(_utc(2026, 11, 30, 11, 50), _utc(2026, 11, 30, 12, 30))
    assert ticks == [
        _utc(2026, 11, 30, 12, 0),
        _utc(2026, 11, 30, 12, 15),
        _utc(2026, 11, 30, 12, 30),
    ]
    assert entry.key(ticks[0]) == "schedule:t.periodic:2026-11-30T12:00:00Z"
    assert parse_tick("2026-11-30T12:00:00Z") == ticks[0]


def test_ticks_window_is_open_at_the_start_and_closed_at_the_end() -> None:
    entry = _entry("0 * * * *")
    assert entry.ticks(_utc(2026, 1, 1, 10), _utc(2026, 1, 1, 11)) == [_utc(2026, 1, 1, 11)]
    assert entry.next_tick(_utc(2026, 1, 1, 11)) == _utc(2026, 1, 1, 12)
    assert entry.previous_tick(_utc(2026, 1, 1, 11)) == _utc(2026, 1, 1, 11)


def test_a_day_of_five_minute_ticks_in_utc_is_288() -> None:
    entry = _entry("*/5 * * * *")
    start = _utc(2026, 6, 1)
    ticks = entry.ticks(start, start + timedelta(days=1))
    assert len(ticks) == len(set(ticks)) == 288


def test_spring_forward_loses_no_tick_and_repeats_none() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 never happens.
    daily = _entry("30 2 * * *", "Europe/Berlin")
    days = daily.ticks(_utc(2026, 3, 27), _utc(2026, 3, 31))
    assert [t.date().day for t in days] == [27, 28, 29, 30]  # one per day, 29th included
    assert days[2] == _utc(2026, 3, 29, 1, 30)  # 03:30 CEST: shifted by the gap
    every5 = _entry("*/5 * * * *", "Europe/Berlin")
    start = _utc(2026, 3, 28, 23)  # 00:00 CET
    ticks = every5.ticks(start, start + timedelta(hours=23))  # the 23-hour local day
    assert len(ticks) == len(set(ticks)) == 23 * 12
    assert all(b - a == timedelta(minutes=5) for a, b in pairwise(ticks))


def test_fall_back_runs_a_repeated_wall_time_once() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    daily = _entry("30 2 * * *", "Europe/Berlin")
    days = daily.ticks(_utc(2026, 10, 23), _utc(2026, 10, 27))
    assert [t.date().day for t in days] == [23, 24, 25, 26]
    assert days[2] == _utc(2026, 10, 25, 0, 30)  # the first 02:30 (CEST)
    hourly = _entry("0 * * * *", "Europe/Berlin")
    start = _utc(2026, 10, 24, 22)  # 00:00 CEST
    ticks = hourly.ticks(start, start + timedelta(hours=25))  # the 25-hour local day
    walls = [t.astimezone(hourly.zone).strftime("%H") for t in ticks]
    assert len(walls) == len(set(walls)) == 24  # each wall-clock hour once, 02:00 included


def test_previous_and_next_tick_across_a_dst_change() -> None:
    daily = _entry("30 2 * * *", "Europe/Berlin")
    assert daily.next_tick(_utc(2026, 3, 28, 2)) == _utc(2026, 3, 29, 1, 30)
    assert daily.previous_tick(_utc(2026, 3, 29, 1, 29)) == _utc(2026, 3, 28, 1, 30)
    assert daily.previous_tick(_utc(2026, 10, 25, 3)) == _utc(2026, 10, 25, 0, 30)


def test_the_reserved_prefix_is_refused_to_applications_and_allowed_to_the_scheduler() -> None:
    with pytest.raises(InvalidKey, match="reserved for the scheduler"):
        key_digest("schedule:t:2026-01-01T00:00:00Z")
    with scheduler_keys():
        assert len(key_digest("schedule:t:2026-01-01T00:00:00Z")) == 64
    with pytest.raises(InvalidKey, match="reserved"):
        key_digest("schedule:t:2026-01-01T00:00:00Z")
