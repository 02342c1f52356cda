"""The scheduler on every backend: ticks recorded through record(), catch-up policies,
replays across restarts, a tick held by another version, and `schedule list`'s data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from outbox import Registry
from outbox.db.connection import Connection, Database
from outbox.errors import ConfigurationError
from outbox.job import key_digest, scheduler_keys
from outbox.schedule.service import Scheduler, SchedulerConfig, status

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FakeClock:
    """The scheduler's injected clock: UNIX seconds, moved by the test."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at.timestamp()


def _registry(cron: str = "0 * * * *", payload: object = None) -> Registry:
    registry = Registry()
    registry.schedule(cron, name="t.periodic", job="t.noop", queue="periodic", payload=payload)
    return registry


def _keys(conn: Connection) -> dict[str, str]:
    rows = conn.execute_sql("SELECT key_digest, message_id, job_name, queue FROM outbox_messages")
    assert all(r[2:] == ("t.noop", "periodic") for r in rows)
    return {str(r[0]): str(r[1]) for r in rows}


def _digest(tick: datetime) -> str:
    with scheduler_keys():
        return key_digest(f"schedule:t.periodic:{tick.strftime('%Y-%m-%dT%H:%M:%SZ')}")


def _scheduler(
    database: Database, registry: Registry, clock: FakeClock, **config: object
) -> Scheduler:
    return Scheduler(database, registry, SchedulerConfig(**config), clock=clock)  # type: ignore[arg-type]


def test_each_due_tick_is_recorded_once_under_its_schedule_key(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START + timedelta(minutes=1))
    registry = _registry("*/15 * * * *")
    with _scheduler(database, registry, clock, catch_up="all", catch_up_window=3600) as s:
        first = s.run_once()
        assert [r.tick for r in first] == [START - timedelta(minutes=45 - 15 * i) for i in range(4)]
        assert s.run_once() == []  # nothing new fell due
        clock.at += timedelta(minutes=15)
        assert [r.tick for r in s.run_once()] == [START + timedelta(minutes=15)]
    keys = _keys(conn)
    assert set(keys) == {_digest(r.tick) for r in first} | {_digest(START + timedelta(minutes=15))}
    # A restarted scheduler looking over the same hour replays: same ids, no new rows.
    with _scheduler(database, registry, clock, catch_up="all", catch_up_window=3600) as again:
        replayed = again.run_once()
    assert len(replayed) == 4  # 11:30-12:15: the window moved past 11:15
    assert all(keys[_digest(r.tick)] == r.message_id for r in replayed)
    assert _keys(conn) == keys


def test_latest_policy_records_only_the_newest_missed_tick(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START + timedelta(hours=3, minutes=10))  # down since before 12:00
    with _scheduler(database, _registry(), clock) as s:
        with capture_logs() as logs:
            done = s.run_once()
        assert [r.tick for r in done] == [START + timedelta(hours=3)]
        assert any(e["event"] == "schedule.skipped" and e["missed"] > 0 for e in logs)
        clock.at += timedelta(hours=4)  # stalled for four ticks while running
        assert [r.tick for r in s.run_once()] == [START + timedelta(hours=7)]
    assert set(_keys(conn)) == {_digest(START + timedelta(hours=h)) for h in (3, 7)}


def test_all_policy_catches_up_within_the_window_and_the_cap(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START + timedelta(hours=5))
    config = {"catch_up": "all", "catch_up_window": 3 * 3600.0, "max_catch_up": 2}
    with _scheduler(database, _registry(), clock, **config) as s:
        assert [r.tick for r in s.run_once()] == [START + timedelta(hours=h) for h in (4, 5)]
    config["max_catch_up"] = 100
    with _scheduler(database, _registry(), clock, **config) as s:
        assert [r.tick for r in s.run_once()] == [START + timedelta(hours=h) for h in (3, 4, 5)]
    assert len(_keys(conn)) == 3  # 12:00-14:00 were outside the window: never recorded


def test_none_policy_records_nothing_missed_before_start(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START + timedelta(minutes=30))
    with _scheduler(database, _registry(), clock, catch_up="none") as s:
        assert s.run_once() == []
        clock.at = START + timedelta(hours=1)
        assert [r.tick for r in s.run_once()] == [START + timedelta(hours=1)]
    assert set(_keys(conn)) == {_digest(START + timedelta(hours=1))}


def test_a_tick_held_by_another_version_is_logged_not_recorded_twice(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START)
    with _scheduler(database, _registry(payload={"v": "secret-1"}), clock) as old:
        (first,) = old.run_once()
    with (
        _scheduler(database, _registry(payload={"v": "secret-2"}), clock) as new,
        capture_logs() as logs,
    ):
        (second,) = new.run_once()
    assert first.message_id is not None and second.message_id is None
    conflict = [e for e in logs if e["event"] == "schedule.conflict"]
    assert conflict and conflict[0]["holder"] == first.message_id
    assert "secret" not in str(logs)  # never the payload
    assert _keys(conn) == {_digest(START): first.message_id}


def test_dst_changes_in_a_named_timezone_record_one_tick_per_day(
    database: Database, conn: Connection
) -> None:
    registry = Registry()
    registry.schedule(
        "30 2 * * *", name="t.periodic", job="t.noop", queue="periodic", timezone="Europe/Berlin"
    )
    for first_day in (datetime(2026, 3, 27, tzinfo=UTC), datetime(2026, 10, 23, tzinfo=UTC)):
        clock = FakeClock(first_day)
        with _scheduler(database, registry, clock, catch_up="none") as s:
            s.run_once()
            for _ in range(4 * 24 * 2):  # four days, a look every 30 minutes
                clock.at += timedelta(minutes=30)
                s.run_once()
    rows = conn.execute_sql("SELECT count(*) FROM outbox_messages")
    assert rows[0][0] == 8  # 27-30 March and 23-26 October: each day once


def test_status_shows_the_last_recorded_and_the_next_tick(
    database: Database, conn: Connection
) -> None:
    clock = FakeClock(START + timedelta(minutes=5))
    registry = _registry()
    registry.schedule("0 0 * * *", name="t.daily", job="t.noop", queue="periodic")
    with _scheduler(database, registry, clock) as s:
        s.run_once()
    hourly, daily = status(conn, registry, clock.at + timedelta(hours=2))
    assert hourly["last_tick"] == START and hourly["next_tick"] == START + timedelta(hours=3)
    assert daily["next_tick"] == datetime(2026, 12, 1, tzinfo=UTC)
    assert daily["last_tick"] == datetime(2026, 11, 30, tzinfo=UTC)  # caught up at start
    assert hourly["last_message_id"] is not None


def test_the_scheduler_reads_the_database_clock_by_default(database: Database) -> None:
    with Scheduler(database, _registry()) as s:
        now = s.now()
    assert abs((now - datetime.now(UTC)).total_seconds()) < 300


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"catch_up": "some"}, "catch_up must be one of latest, all, none"),
        ({"catch_up_window": -1}, "catch_up_window"),
        ({"max_catch_up": 0}, "max_catch_up"),
        ({"max_sleep": 0}, "max_sleep"),
    ],
)
def test_a_bad_config_fails_when_built(config: dict[str, object], why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        SchedulerConfig(**config)  # type: ignore[arg-type]
