"""The relay's handoff on every backend: one batch, verification, quarantine, wake-ups."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from outbox import status as outbox_status
from outbox.db.connection import Connection, Database
from outbox.db.sql import queries
from outbox.errors import ConfigurationError, DatabaseError
from outbox.relay import BatchResult, Relay, RelayConfig, RunTotals
from outbox.relay.verify import REASONS
from tests.fixtures.factories import Rows
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.relays import (
    MARKER,
    captured_logs,
    db_now_ms,
    outbox_rows,
    plant_corruptions,
    queued_ids,
    record_many,
    set_column,
)


def _relay(database: Database, **config: Any) -> Relay:
    return Relay(database, RelayConfig(**config))


def _run(database: Database, **config: Any) -> RunTotals:
    with _relay(database, **config) as relay:
        return relay.run()


def _once(database: Database, **config: Any) -> BatchResult:
    with _relay(database, **config) as relay:
        return relay.run_once()


def test_relay_hands_off_pending_intents_once_oldest_first(
    database: Database, db_url: str, conn: Connection
) -> None:
    ids = record_many(db_url, [f"k{i}" for i in range(5)])
    with _relay(database, batch_size=3) as relay:
        first = relay.run_once()
        assert (first.claimed, first.handed_off, first.quarantined) == (3, 3, 0)
        assert queued_ids(conn) == ids[:3]
        second = relay.run_once()
        assert (second.claimed, second.handed_off) == (2, 2)
        assert relay.run_once().claimed == 0
    assert queued_ids(conn) == ids
    assert outbox_rows(conn) == {i: ("handed_off", None, True) for i in ids}


def test_relay_copies_the_job_into_the_queue_row(
    database: Database, db_url: str, conn: Connection
) -> None:
    from outbox import Job, record
    from tests.fixtures.databases import raw_connect

    app = raw_connect(db_url)
    mid = record(app, "one", Job("mail.send", {"to": "é", "n": [1, 2]}, "mail", max_attempts=7))
    app.commit()
    app.close()
    before = db_now_ms(conn)
    _run(database)
    after = db_now_ms(conn)
    rows = conn.execute_sql(
        "SELECT j.message_id, j.queue, j.job_name, j.payload, j.attempts, j.max_attempts,"
        " j.available_at, j.created_at, j.reserved_by, k.created_at FROM outbox_jobs j"
        " JOIN outbox_keys k ON k.message_id = j.message_id"
    )
    [(m, queue, name, payload, attempts, max_attempts, available_at, created, by, keyed)] = rows
    assert (m, queue, name, payload) == (mid, "mail", "mail.send", '{"n":[1,2],"to":"é"}')
    assert (attempts, max_attempts, by) == (0, 7, None)
    assert before <= created == available_at <= after
    assert keyed <= before  # the key row stays, as recorded
    assert outbox_rows(conn) == {mid: ("handed_off", None, True)}  # the intent moved


def test_relay_hands_off_future_intents_early_but_keeps_their_time(
    database: Database, db_url: str, conn: Connection
) -> None:
    from tests.fixtures import queue_ops as ops

    due = time.time() + 3600
    [later] = record_many(db_url, ["later"], available_at=due)
    [now] = record_many(db_url, ["now"])
    assert _run(database).handed_off == 2
    [(available_at,)] = conn.execute_sql(
        f"SELECT available_at FROM outbox_jobs WHERE message_id = '{later}'"
    )
    assert available_at == round(due * 1000)
    assert available_at > db_now_ms(conn)
    assert outbox_status.status(conn).queues["q1"].delayed == 1
    # Handed off early, but a worker cannot claim it before its time; its peer it can.
    claimed = ops.claim(conn, "q1", 10, "w1", 60_000)
    assert [j.message_id for j in claimed] == [now]


@pytest.mark.parametrize("in_python", [False, True], ids=["sql", "python"])
def test_relay_quarantines_corrupt_rows_and_hands_off_their_peers(
    database: Database, db_url: str, conn: Connection, in_python: bool
) -> None:
    good_before = record_many(db_url, ["g1", "g2"])
    expected = plant_corruptions(conn, db_url)
    good_after = record_many(db_url, ["g3"])
    with captured_logs() as logs:
        batch = _once(database, batch_size=50, verify_in_python=in_python)
    assert (batch.claimed, batch.handed_off, batch.quarantined) == (10, 3, 7)
    assert dict(batch.quarantined_ids) == expected
    assert queued_ids(conn) == good_before + good_after
    rows = outbox_rows(conn)
    for mid, reason in expected.items():
        assert rows[mid] == ("failed", reason, False)
    for mid in good_before + good_after:
        assert rows[mid] == ("handed_off", None, True)
    quarantined = {e["message_id"]: e["reason"] for e in logs if e["event"] == "relay.quarantined"}
    assert quarantined == expected
    assert set(expected.values()) <= set(REASONS)
    one_statement = "relay_handoff" in queries(database.dialect) and not in_python
    fell_back = any(e["event"] == "relay.verify_fallback" for e in logs)
    assert fell_back == one_statement  # PostgreSQL's ::json cast cannot judge "{not json"
    assert MARKER not in repr(logs)


def test_relay_quarantines_a_bad_max_attempts_and_a_negative_time(
    database: Database, db_url: str, conn: Connection
) -> None:
    a, b = record_many(db_url, ["m1", "m2"])
    set_column(conn, a, "max_attempts", 0)
    set_column(conn, b, "available_at", -5)
    batch = _once(database)
    assert dict(batch.quarantined_ids) == {a: "invalid_max_attempts", b: "invalid_available_at"}


def test_relay_refuses_a_double_handoff_loudly_and_rolls_back(
    database: Database, db_url: str, conn: Connection, rows: Rows
) -> None:
    first, second = record_many(db_url, ["d1", "d2"])
    rows.job(message_id=second, queue="q1", job_name="tests.echo")
    with pytest.raises(DatabaseError, match="relay batch failed"):
        _once(database)
    assert outbox_rows(conn) == {first: ("pending", None, False), second: ("pending", None, False)}
    assert queued_ids(conn) == [second]


def test_relay_logs_one_event_per_batch_without_payloads(database: Database, db_url: str) -> None:
    record_many(db_url, [f"l{i}" for i in range(3)])
    with captured_logs() as logs:
        _run(database, batch_size=2)
    batches = [e for e in logs if e["event"] == "relay.batch"]
    assert [(e["size"], e["handed_off"], e["quarantined"]) for e in batches] == [
        (2, 2, 0),
        (1, 1, 0),
        (0, 0, 0),
    ]
    assert all(isinstance(e["duration_ms"], float) for e in batches)
    assert MARKER not in repr(logs)


def test_relay_run_stops_at_its_limit(database: Database, db_url: str, conn: Connection) -> None:
    ids = record_many(db_url, [f"r{i}" for i in range(5)])
    with _relay(database, batch_size=2) as relay:
        totals = relay.run(limit=3)
    assert (totals.claimed, totals.handed_off, totals.batches) == (3, 3, 2)
    assert queued_ids(conn) == ids[:3]


def test_relay_config_rejects_nonsense() -> None:
    with pytest.raises(ConfigurationError, match="batch_size"):
        RelayConfig(batch_size=0)
    with pytest.raises(ConfigurationError, match="poll_interval"):
        RelayConfig(poll_interval=10, max_poll_interval=1)


def test_relay_watch_hands_off_what_commits_while_it_runs(
    database: Database, db_url: str, conn: Connection
) -> None:
    _watch_and_record(database, db_url, conn, RelayConfig(poll_interval=0.05))


def test_relay_watch_poll_only_hands_off_too(
    database: Database, db_url: str, conn: Connection
) -> None:
    _watch_and_record(database, db_url, conn, RelayConfig(poll_interval=0.05, listen=False))


def _watch_and_record(
    database: Database, db_url: str, conn: Connection, config: RelayConfig
) -> None:
    with _watching(Relay(database, config)):
        ids = record_many(db_url, ["w1", "w2"])
        _wait_for(lambda: len(queued_ids(conn)) == 2)
    assert queued_ids(conn) == ids


@contextmanager
def _watching(relay: Relay) -> Iterator[None]:
    """``relay.watch`` in a thread for the block; then stop it and insist it ended."""
    stop = threading.Event()
    thread = threading.Thread(target=relay.watch, args=(stop,))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
        relay.close()
    assert not thread.is_alive(), "watch did not stop when told"


def _wait_for(condition: Any, deadline_s: float = 30.0) -> None:
    """Poll until ``condition()``; the deadline only bounds a failure, never asserts speed."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, "condition not met before the deadline"
        time.sleep(0.02)


@contextmanager
def _listening_relay(database: Database, conn: Connection) -> Iterator[list[Any]]:
    """A watching relay that polls too rarely to matter (60 s): within the tests'
    deadlines only a wake-up moves rows. Yields its captured log events once it listens;
    then ends its LISTEN session, as a failover or an admin would."""
    if not database.dialect.supports_listen:
        skip_gap(Gap.LISTEN_NOTIFY)
    relay = Relay(database, RelayConfig(poll_interval=60.0, max_poll_interval=60.0))
    with captured_logs() as logs, _watching(relay):
        _wait_for(lambda: any(e["event"] == "relay.listening" for e in logs))
        conn.execute_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE query = 'LISTEN outbox_relay' AND pid <> pg_backend_pid()"
            " AND datname = current_database()"
        )
        yield logs


def test_relay_wakes_on_notify_and_survives_losing_its_listen_connection(
    database: Database, db_url: str, conn: Connection
) -> None:
    with _listening_relay(database, conn) as logs:
        _wait_for(lambda: sum(e["event"] == "relay.listening" for e in logs) >= 2)
        record_many(db_url, ["n1"])
        _wait_for(lambda: len(queued_ids(conn)) == 1)
    assert any(e["event"] == "relay.listen_lost" for e in logs)


def test_relay_hands_off_at_once_what_was_recorded_while_it_was_not_listening(
    database: Database, db_url: str, conn: Connection
) -> None:
    with _listening_relay(database, conn):
        record_many(db_url, ["gap"])  # its NOTIFY reaches nobody: no session listens
        # Well before the 60 s poll: the relay catches up as soon as it listens again.
        _wait_for(lambda: len(queued_ids(conn)) == 1, deadline_s=20)


def test_relay_notifies_idle_workers_when_it_hands_off(database: Database, db_url: str) -> None:
    if not database.dialect.supports_listen:
        skip_gap(Gap.LISTEN_NOTIFY)
    listener = database.connect()
    listener.execute_sql("LISTEN outbox_jobs")
    record_many(db_url, ["j1"])
    _run(database)
    got = list(listener.raw.notifies(timeout=10, stop_after=1))
    listener.close()
    assert [n.channel for n in got] == ["outbox_jobs"]


def test_relay_claims_only_pending_rows(database: Database, rows: Rows) -> None:
    rows.intent(state="weird")
    assert _once(database).claimed == 0


def _kill_other_sessions(conn: Connection) -> None:
    """End every other session on this database, as a failover or an admin would."""
    if conn.dialect.name == "postgresql":
        conn.execute_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name = 'outbox'"  # our own connections, not the test run's
        )
        return
    ids = conn.execute_sql(
        "SELECT id FROM information_schema.processlist"
        " WHERE db = DATABASE() AND id <> CONNECTION_ID()"
    )
    for (session,) in ids:
        conn.execute_sql(f"KILL {int(session)}")


def test_relay_watch_survives_losing_its_database_connection(
    database: Database, db_url: str, conn: Connection
) -> None:
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_FILE)
    relay = Relay(database, RelayConfig(poll_interval=0.05, max_poll_interval=0.2))
    with captured_logs() as logs, _watching(relay):
        first = record_many(db_url, ["c1"])
        _wait_for(lambda: queued_ids(conn) == first)
        _kill_other_sessions(conn)
        second = record_many(db_url, ["c2"])
        _wait_for(lambda: queued_ids(conn) == first + second)
    assert any(e["event"] == "relay.batch_failed" for e in logs)
    assert MARKER not in repr(logs)
