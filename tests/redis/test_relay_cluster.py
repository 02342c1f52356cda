"""The relay against a Redis Cluster of three masters: each queue's call runs on the node
its hash tag names, queues spread over every node, and a re-publish adds nothing."""

from __future__ import annotations

from typing import Any

import pytest
from redis.cluster import RedisCluster

from outbox.db.connection import Database
from outbox.db.rows import OutboxHandoff
from outbox.errors import OutboxError
from outbox.queue.redis import names
from outbox.queue.redis.url import parse_url
from outbox.relay import Relay, RelayConfig
from outbox.relay.redis import RedisSettings, RedisTarget
from outbox.relay.verify import reason_for
from outbox.status import pending_count
from tests.fixtures.redis_servers import RedisClusterServers, message_ids, queue_name, record_jobs


def test_the_relay_publishes_every_queue_to_its_node_once(
    database: Database, db_url: str, redis_cluster: RedisClusterServers
) -> None:
    queues = [queue_name("cq") for _ in range(9)]
    ids = {q: record_jobs(db_url, q, 4) for q in queues}
    target = RedisTarget(parse_url(redis_cluster.url), RedisSettings(), reconnect_max=5.0)

    class Crash(OutboxError):
        """The relay dies after every node's reply, before COMMIT."""

    def publish_then_die(intents: list[Any]) -> set[str]:
        assert len(target._publish(intents, [])) == 36
        raise Crash()

    with database.connect() as conn, pytest.raises(Crash):
        conn.driver.outbox_handoff_published(OutboxHandoff(500), reason_for, publish_then_die)
    with Relay(database, RelayConfig(batch_size=500), target=target) as relay:
        assert relay.run().handed_off == 36  # one batch of nine queues, published twice
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
    try:
        for q in queues:
            assert message_ids(client, q) == {i: 1 for i in ids[q]}
        nodes = {client.get_node_from_key(names.stream(q)).port for q in queues}
        assert len(nodes) > 1  # the queues really are spread over the masters
    finally:
        client.close()
    with database.connect() as conn:
        assert pending_count(conn) == 0
