"""The Schedules page's read on every backend: next ticks, the last recorded tick, and
where that tick's job is now."""

from __future__ import annotations

from datetime import timedelta

from outbox.dashboard import schedules
from outbox.db.connection import Connection, Database
from outbox.queue import Registry
from tests.dashboard import seed


def _by_name(conn: Connection) -> dict[str, schedules.Schedule]:
    _, rows = schedules.read(conn, seed.registry)
    return {s.entry.name: s for s in rows}


def test_each_schedule_shows_its_next_ticks_and_its_last_run_where_it_is_now(
    database: Database, db_url: str, conn: Connection
) -> None:
    assert schedules.read(conn, Registry())[1] == []  # a registry without periodic jobs
    now, rows = schedules.read(conn, seed.registry)
    assert [s.entry.name for s in rows] == ["dash.every_minute", "dash.nightly_berlin"]
    assert all(s.last is None for s in rows)  # nothing recorded yet
    minute = rows[0]
    assert len(minute.next_ticks) == schedules.NEXT_TICKS
    assert minute.next_ticks[0] > now and minute.next_ticks[0] - now <= timedelta(minutes=1)
    assert [b - a for a, b in zip(minute.next_ticks, minute.next_ticks[1:], strict=False)] == [
        timedelta(minutes=1)
    ] * 2
    nightly = rows[1].next_ticks[0].astimezone(rows[1].entry.zone)
    assert (nightly.hour, nightly.minute) == (3, 0)

    ids = seed.schedule(db_url)
    last = _by_name(conn)["dash.every_minute"].last
    assert last is not None and last.message_id in ids and last.state == "pending"
    assert last.tick <= now + timedelta(minutes=1)
    seed.relay(db_url)
    assert _by_name(conn)["dash.every_minute"].last.state == "queued"  # type: ignore[union-attr]
    seed.run_queue(db_url, "periodic")  # every_minute runs; nightly's job has no handler here
    states = {n: s.last.state for n, s in _by_name(conn).items() if s.last}
    assert states["dash.every_minute"] == "left the queue"
    assert states["dash.nightly_berlin"] == "queued"  # released: no handler for dash.report


def test_a_dead_lettered_tick_says_so(database: Database, db_url: str, conn: Connection) -> None:
    [dead] = seed.dead_letters(db_url, 1)
    assert schedules.state_of(conn, dead) == "dead-lettered"
    [quarantined] = seed.quarantined(db_url, 1)
    assert schedules.state_of(conn, quarantined) == "quarantined"
