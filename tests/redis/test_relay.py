"""The relay's Redis Streams target against the real Redis, on every SQL backend: the
entries and their streams, the handoff after Redis's reply, a re-publish absorbed by the
seen markers, a full stream refusing, and the durability options."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from outbox.db.connection import Database
from outbox.db.rows import OutboxHandoff
from outbox.errors import BrokerError, ConfigurationError, OutboxError, TargetRefused
from outbox.jetstream import codec
from outbox.queue.redis import names
from outbox.queue.redis.url import parse_url
from outbox.relay import Relay, RelayConfig
from outbox.relay.redis import RedisSettings, RedisTarget
from outbox.relay.verify import reason_for
from outbox.status import pending_count
from tests.fixtures.databases import placeholder
from tests.fixtures.redis_servers import (
    PASSWORD,
    RedisServer,
    entries,
    message_ids,
    record_jobs,
)
from tests.fixtures.relays import captured_logs


def target(url: str, **settings: Any) -> RedisTarget:
    return RedisTarget(parse_url(url), RedisSettings(**settings), reconnect_max=5.0)


def relay(db: Database, url: str, batch_size: int = 100, **settings: Any) -> Relay:
    config = RelayConfig(batch_size=batch_size, reconnect_max=5.0)
    return Relay(db, config, target=target(url, **settings))


def pending(db: Database) -> int:
    with db.connect() as conn:
        return pending_count(conn)


@pytest.fixture
def client(redis_url: str) -> Any:
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


def test_every_intent_becomes_one_entry_on_its_band_then_leaves_the_outbox(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    q = redis_queue
    urgent = record_jobs(db_url, q, 4, prefix="u", priority=0)
    later = record_jobs(db_url, q, 3, prefix="l", priority=7)
    with relay(database, redis_url, batch_size=3, in_flight=1) as r:  # in id order
        totals = r.run()
    assert (totals.handed_off, totals.batches) == (7, 3)
    assert pending(database) == 0
    band0, band7 = entries(client, names.stream(q, 0)), entries(client, names.stream(q, 7))
    assert [e[codec.MESSAGE_ID] for e in band0] == urgent  # id order, once each
    assert [e[codec.MESSAGE_ID] for e in band7] == later
    first = band0[0]
    assert first[codec.MSG_ID] == urgent[0] and first[codec.JOB] == "t.ok"
    assert first[names.DATA_FIELD] == '{"i":0}'  # the body JetStream would carry
    job = codec.decode_job(q, 1, 1, first, first[names.DATA_FIELD].encode())
    assert (job.message_id, job.queue, job.payload) == (urgent[0], q, '{"i":0}')
    seen = client.get(names.seen_key(q, urgent[0]))
    assert seen is not None and 0 < client.pttl(names.seen_key(q, urgent[0])) <= 120_000


def test_a_keyed_intent_goes_to_its_keys_partition_in_order(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    q = redis_queue
    ids = record_jobs(db_url, q, 5, ordering_key="customer-7", priority=3)
    with relay(database, redis_url) as r:
        assert r.run().handed_off == 5
    found = [s for s in names.ordered_streams(q) if client.xlen(s)]
    assert len(found) == 1  # one key, one partition; its priority does not count
    assert [e[codec.MESSAGE_ID] for e in entries(client, found[0])] == ids
    assert not any(client.xlen(s) for s in names.band_streams(q))


def test_publishing_a_batch_again_after_a_lost_commit_adds_nothing(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    q = redis_queue
    ids = record_jobs(db_url, q, 8)
    t = target(redis_url)

    class Crash(OutboxError):
        """The relay dies after Redis's reply, before COMMIT."""

    def publish_then_die(intents: list[Any]) -> set[str]:
        assert len(t._publish(intents, [])) == 8  # Redis has them: now die before COMMIT
        raise Crash()

    with database.connect() as conn, pytest.raises(Crash):
        conn.driver.outbox_handoff_published(OutboxHandoff(100), reason_for, publish_then_die)
    assert pending(database) == 8  # rolled back: still pending
    with relay(database, redis_url) as r:
        assert r.run().handed_off == 8  # published again, acknowledged as duplicates
    t.close()
    assert message_ids(client, q) == {i: 1 for i in ids}
    assert pending(database) == 0


def test_a_full_stream_refuses_the_rest_and_they_stay_pending(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    q = redis_queue
    ids = record_jobs(db_url, q, 12)
    with relay(database, redis_url, max_len=5, in_flight=1) as r:
        with pytest.raises(TargetRefused) as err:
            r.run()
        assert (err.value.handed_off, err.value.limit) == (5, "max_len")
        assert names.stream(q) in str(err.value) and "7 intents stay pending" in str(err.value)
        assert pending(database) == 7  # nothing dropped, nothing trimmed
        assert client.xlen(names.stream(q)) == 5
        with pytest.raises(TargetRefused):
            r.run()  # still full: nothing moves
        assert pending(database) == 7
        first = client.xrange(names.stream(q), count=3)
        client.xdel(names.stream(q), *(entry_id for entry_id, _ in first))  # a worker acked 3
        with pytest.raises(TargetRefused) as err:
            r.run()
        assert err.value.handed_off == 3
    assert [e[codec.MESSAGE_ID] for e in entries(client, names.stream(q))] == ids[3:8]
    assert pending(database) == 4


def test_a_relay_watching_a_full_stream_backs_off_then_catches_up(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    import threading

    q = redis_queue
    ids = record_jobs(db_url, q, 6)
    stop = threading.Event()
    with relay(database, redis_url, max_len=2) as r, captured_logs() as logs:
        runner = threading.Thread(target=r.watch, args=(stop,))
        runner.start()
        try:
            for _ in range(3):  # a worker takes what the stream holds, twice at a time
                _wait(lambda: client.xlen(names.stream(q)) == 2)
                client.delete(names.stream(q))
            _wait(lambda: pending(database) == 0)
        finally:
            stop.set()
            runner.join(30)
    refused = [e for e in logs if e["event"] == "relay.target_refused"]
    assert refused and refused[0]["limit"] == "max_len"
    assert all(ids[0] not in str(e) for e in logs)  # ids aside: no payload in any event
    assert pending(database) == 0


def _wait(predicate: Any) -> None:
    from tests.fixtures.processes import wait_until

    wait_until(predicate, 30)


def test_waiting_for_replicas_a_server_has_not_keeps_the_batch_pending(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    q = redis_queue
    ids = record_jobs(db_url, q, 4)
    with (
        relay(database, redis_url + "?wait=1&wait_timeout=0.2") as r,
        pytest.raises(BrokerError) as err,
    ):
        r.run()
    assert err.value.transient and "0 of 1 replicas" in str(err.value)
    assert pending(database) == 4  # Redis has them, unreplicated: the outbox keeps them
    with relay(database, redis_url) as r:
        assert r.run().handed_off == 4  # the seen markers absorb the second publish
    assert message_ids(client, q) == {i: 1 for i in ids}


def test_fsync_always_refuses_a_server_that_does_not(redis_auth: RedisServer) -> None:
    with pytest.raises(ConfigurationError) as err:  # a server without appendonly
        target(redis_auth.url + "?fsync=always").open()
    text = str(err.value)
    assert "appendonly no" in text and "appendfsync always" in text
    assert f"127.0.0.1:{redis_auth.port}" in text and PASSWORD not in text


def test_a_window_shorter_than_the_retry_horizon_is_refused(redis_url: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        target(redis_url, dedupe_window=10, publish_timeout=10)
    assert "dedupe window" in str(err.value) and "horizon" in str(err.value)
    for bad in ({"max_len": -1}, {"in_flight": 0}):
        with pytest.raises(ConfigurationError):
            RedisSettings(**bad)


def test_an_unreachable_redis_fails_the_batch_and_keeps_it(
    database: Database, db_url: str, redis_queue: str
) -> None:
    from tests.fixtures.ports import free_port

    record_jobs(db_url, redis_queue, 3)
    with (
        relay(database, f"redis://:hunter2@127.0.0.1:{free_port()}/0") as r,
        pytest.raises(BrokerError) as err,
    ):
        r.run()
    assert err.value.transient and "cannot reach Redis" in str(err.value)
    assert "hunter2" not in str(err.value) and "***" in str(err.value)
    assert pending(database) == 3


def test_the_relay_says_at_connect_what_an_acknowledged_handoff_survives(
    redis_url: str, redis_aof: RedisServer, client: Any
) -> None:
    shared_fsyncs = client.config_get("appendfsync")["appendfsync"]
    aof = redis_aof.client()
    with captured_logs() as logs:
        for url in (redis_url, redis_aof.url + "?fsync=always"):
            t = target(url)
            t.open()
            t.close()
        aof.config_set("maxmemory-policy", "allkeys-lru")
        try:
            target(redis_aof.url).open()
        finally:
            aof.config_set("maxmemory-policy", "noeviction")
    said = [(e["event"], e.get("appendfsync"), e.get("maxmemory_policy")) for e in logs]
    if shared_fsyncs != "always":
        assert said[0] == ("relay.redis_not_fsynced", shared_fsyncs, "noeviction")
    assert said[1] == ("relay.redis_durability", "always", "noeviction")
    assert said[2] == ("relay.redis_evicts_keys", "always", "allkeys-lru")
    assert all("password" not in str(e) for e in logs)


def test_a_payload_reaches_its_entry_exactly_as_the_outbox_stored_it(
    database: Database, db_url: str, redis_url: str, redis_queue: str, client: Any
) -> None:
    payload = {"name": "Zoë ✓ 𝄞", "text": 'a "quote" \\ back\u0000slash\n', "n": [1, 2.5, None]}
    [mid] = record_jobs(db_url, redis_queue, 1, payload=payload)
    with database.connect() as conn:
        sql = f"SELECT payload FROM outbox_messages WHERE message_id = {placeholder(conn)}"
        [(stored,)] = conn.execute_sql(sql, (mid,))
    with relay(database, redis_url) as r:
        assert r.run().handed_off == 1
    [entry] = entries(client, names.stream(redis_queue))
    assert entry[names.DATA_FIELD] == stored  # byte for byte, through the script's JSON
