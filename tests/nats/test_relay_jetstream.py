"""The relay's JetStream target against a real nats-server: message ids, stream names,
the handoff after the PubAck, re-publish absorbed, provisioning, backpressure."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import NotFoundError
from structlog.testing import capture_logs

from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.db.rows import OutboxHandoff
from outbox.errors import BrokerError, OutboxError, TargetRefused
from outbox.jetstream import admin, names
from outbox.jetstream.connect import Broker, parse_url
from outbox.jetstream.provision import StreamSettings
from outbox.relay import Relay, RelayConfig
from outbox.relay.verify import reason_for
from tests.fixtures.databases import sqlite_url
from tests.fixtures.processes import wait_until
from tests.fixtures.relays import (
    MARKER,
    captured_logs,
    outbox_rows,
    plant_corruptions,
    record_many,
    set_column,
)
from tests.nats import support
from tests.nats.servers import run


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
    return db, url


def test_relay_publishes_every_intent_under_its_message_id_then_deletes_it(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    ids = support.record_jobs(url, queue, 25)
    with support.relay(db, nats_url, batch_size=10) as relay:
        totals = relay.run()
    assert (totals.handed_off, totals.batches) == (25, 3)
    pairs = support.msg_ids(nats_url, queue)
    assert sorted(pairs) == sorted((i, i) for i in ids)  # Nats-Msg-Id is the id, no prefix
    assert queue in names.stream(queue) and queue in names.dead_stream(queue)
    assert support.stream_count(nats_url, names.dead_stream(queue)) == 0
    assert support.outbox_rows(url) == (0, 25)  # handed off; the keys stay


def test_republish_after_a_lost_commit_is_absorbed_by_the_duplicate_window(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    ids = support.record_jobs(url, queue, 8)
    jet = support.target(nats_url)

    class Crash(OutboxError):
        """The relay dies after the PubAcks, before COMMIT."""

    def publish_then_die(intents: list[Any]) -> set[str]:
        acked = jet._publish(jet._connected(), intents, [])
        assert len(acked) == 8  # the broker has them: now die before COMMIT
        raise Crash()

    with db.connect() as conn, pytest.raises(Crash):
        conn.driver.outbox_handoff_published(OutboxHandoff(100), reason_for, publish_then_die)
    assert support.outbox_rows(url) == (8, 8)  # rolled back: still pending
    with support.relay(db, nats_url) as relay:
        assert relay.run().handed_off == 8
    jet.close()
    assert support.stream_ids(nats_url, names.stream(queue)) == {i: 1 for i in ids}
    assert support.outbox_rows(url) == (0, 8)


def test_require_names_the_missing_stream_and_leaves_the_outbox_alone(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    support.record_jobs(url, queue, 3)
    with (
        support.relay(db, nats_url, provisioning="require") as relay,
        pytest.raises(BrokerError) as err,
    ):
        relay.run()
    assert names.stream(queue) in str(err.value) and "require" in str(err.value)
    assert not err.value.transient
    assert support.outbox_rows(url) == (3, 3)
    assert support.stream_count(nats_url, names.stream(queue)) == -1  # never created


def test_require_names_a_wrong_setting_of_an_existing_stream(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    for name, subject in (
        (names.stream(queue), names.subject(queue)),
        (names.dead_stream(queue), names.dead_subject(queue)),
    ):
        config = StreamConfig(name=name, subjects=[subject], retention=RetentionPolicy.LIMITS)
        run(nats_url, lambda js, c=config: js.add_stream(c))
    support.record_jobs(url, queue, 2)
    with (
        support.relay(db, nats_url, provisioning="require") as relay,
        pytest.raises(BrokerError) as err,
    ):
        relay.run()
    text = str(err.value)
    assert names.stream(queue) in text and "retention" in text and "workqueue" in text
    assert support.outbox_rows(url) == (2, 2)


def test_relay_refuses_a_duplicate_window_shorter_than_its_retry_horizon(nats_url: str) -> None:
    with pytest.raises(BrokerError) as err:
        support.target(nats_url, streams=StreamSettings(duplicate_window=3))
    assert "duplicate_window" in str(err.value) and "horizon" in str(err.value)


def test_a_full_stream_refuses_and_the_intents_stay_pending(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    support.record_jobs(url, queue, 12)
    with support.relay(db, nats_url, streams=StreamSettings(max_msgs=5)) as relay:
        with pytest.raises(TargetRefused) as err:
            relay.run()
        assert (err.value.handed_off, err.value.limit) == (5, "max_msgs")
        assert names.stream(queue) in str(err.value)
        assert support.outbox_rows(url) == (7, 12)  # nothing dropped
        with Broker(parse_url(nats_url)) as broker:
            state = {s.stream: s.refusing for s in admin.streams(broker)}
        assert state[names.stream(queue)] == "max_msgs"
        # a watching relay logs the refusal once, rate-limited, and keeps backing off
        stop = threading.Event()
        with capture_logs() as logs:
            t = threading.Thread(target=relay.watch, args=(stop,))
            t.start()
            wait_until(
                lambda: any(e["event"] == "relay.target_refused" for e in logs),
                20,
                "the refusal to be logged",
            )
            stop.set()
            t.join(30)
        refusals = [e for e in logs if e["event"] == "relay.target_refused"]
        assert len(refusals) == 1 and refusals[0]["stream"] == names.stream(queue)
    assert support.outbox_rows(url) == (7, 12)


@pytest.mark.parametrize("in_python", [False, True], ids=["sql", "python"])
def test_the_broker_target_quarantines_corrupt_rows_and_publishes_their_peers(
    database: Database, db_url: str, conn: Connection, nats_url: str, in_python: bool
) -> None:
    async def drop(js: Any) -> None:
        for stream in (names.stream("q1"), names.dead_stream("q1")):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(stream)

    run(nats_url, drop)
    good = record_many(db_url, ["g1", "g2"])
    expected = plant_corruptions(conn, db_url)
    config = RelayConfig(batch_size=50, verify_in_python=in_python, reconnect_max=5.0)
    with captured_logs() as logs, Relay(database, config, target=support.target(nats_url)) as r:
        batch = r.run_once()
    assert (batch.claimed, batch.handed_off, batch.quarantined) == (9, 2, 7)
    assert dict(batch.quarantined_ids) == expected
    assert support.stream_ids(nats_url, names.stream("q1")) == {m: 1 for m in good}
    rows = outbox_rows(conn)
    assert {m: rows[m] for m in expected} == {m: ("failed", r, False) for m, r in expected.items()}
    assert {m: rows[m] for m in good} == {m: ("handed_off", None, True) for m in good}
    fell_back = any(e["event"] == "relay.verify_fallback" for e in logs)
    # PostgreSQL's ::json cast cannot judge "{not json": that batch is verified in Python.
    assert fell_back == (database.dialect.name == "postgresql" and not in_python)
    assert MARKER not in repr(logs)


def test_a_message_id_with_a_line_break_cannot_inject_protocol(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    """An operator's UPDATE can put anything in message_id (no fingerprint covers it):
    such a batch is not framed by hand but goes through nats-py, which cleans headers."""
    db, url = sqlite_db
    queue = support.queue_name()
    ids = support.record_jobs(url, queue, 3)
    with db.connect() as c:
        set_column(c, ids[1], "message_id", "bad\r\nPUB x 1")
    with support.relay(db, nats_url) as relay:
        assert relay.run().handed_off == 3
    assert support.outbox_rows(url) == (0, 3)
    cleaned = "bad  PUB x 1"  # nats-py turns each line break into a space
    assert sorted(support.msg_ids(nats_url, queue)) == sorted(
        [(ids[0], ids[0]), (cleaned, cleaned), (ids[2], ids[2])]
    )


def test_batches_in_flight_side_by_side_hand_off_a_backlog_exactly_once(
    database: Database, db_url: str, nats_url: str
) -> None:
    queue = support.queue_name("inflight")
    ids = support.record_jobs(db_url, queue, 95)
    relay = Relay(
        database,
        RelayConfig(batch_size=10, reconnect_max=5.0),
        target=support.target(nats_url, in_flight=3),
    )
    with relay:
        # row locks let batches run side by side; SQLite has one writer
        assert relay.in_flight == (1 if database.dialect.name == "sqlite" else 3)
        totals = relay.run()
        assert (totals.claimed, totals.handed_off) == (95, 95)
        # side by side a batch can come back short (its peers hold the rows it skipped;
        # MariaDB also retries a claim its gap locks deadlocked), so 10 is the least
        assert totals.batches >= 10
        assert support.stream_ids(nats_url, names.stream(queue)) == {i: 1 for i in ids}
        more = support.record_jobs(db_url, queue, 40, prefix="more")
        assert relay.run(limit=23).claimed == 23  # a limit holds across batches in flight
        assert relay.run().claimed == 17
        stop = threading.Event()
        late = support.record_jobs(db_url, queue, 35, prefix="late")
        watcher = threading.Thread(target=relay.watch, args=(stop,))
        watcher.start()
        wait_until(lambda: support.outbox_rows(db_url)[0] == 0, 20, "the watch to drain")
        stop.set()
        watcher.join(20)
    everything = {i: 1 for i in ids + more + late}
    assert support.stream_ids(nats_url, names.stream(queue)) == everything
