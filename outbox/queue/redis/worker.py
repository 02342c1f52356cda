"""The worker on Redis Streams: the same ``Registry``, handlers and ``ctx`` as on SQL.

Each queue's band streams (``outbox.queue.redis.names``) have one consumer group,
``outbox-workers``, shared by every worker process; each process is one consumer of it,
named after its worker id. One asyncio loop runs all queues, each a ``RedisLane``
(``outbox.queue.redis.lane`` draws a delivery's life); everything that is not Redis — the
window, the cap, threads, timeouts, settling through ``outbox.queue.policy``, graceful
stop, the inbox of transactional handlers — is the broker worker's
(``outbox.queue.broker``), the same as on JetStream.

Retries, snoozes and jobs handed off before they are due wait in the queue's delayed
set (``names.delayed_key``) and come back as new entries when due; the attempts spent
travel in the entry (``Outbox-Attempts-Before``). A worker that dies leaves its entries
pending: any worker takes them back once idle past ``--lease`` (``XAUTOCLAIM``), their
delivery counted as an attempt. Pausing a queue (``outbox queue pause --broker
redis://``) sets ``names.paused_key``: every fetch reads it, so the fleet stops taking
from the queue within one fetch (a blocking read, at most ``sleep`` or a second).

Keyed jobs come from the queue's ordered partitions instead, one delivery out per
partition (``outbox.queue.redis.ordered``: an ``OrderedRedisLane`` beside the queue's
``RedisLane``, with slots of its own, ``--concurrency`` again), so a key's jobs run one
at a time in the order the relay handed them off, whatever the number of workers.
"""

from __future__ import annotations

import contextlib
from typing import Any

from redis.asyncio import Redis

from outbox.queue.broker.worker import BrokerWorker
from outbox.queue.config import WorkerConfig
from outbox.queue.redis.connect import RedisUrl, checked_client
from outbox.queue.redis.lane import RedisLane
from outbox.queue.redis.ordered import OrderedRedisLane
from outbox.queue.registry import Registry

REDIS_SYSTEM = "redis"  # messaging.system of the attempt spans (OpenTelemetry's name)


class RedisWorker(BrokerWorker):
    """Runs the jobs of ``config.queues`` from Redis Streams until stopped (``run``); each
    queue is one ``RedisLane``. The rest is ``outbox.queue.broker.worker``'s."""

    def __init__(
        self, url: RedisUrl, registry: Registry, config: WorkerConfig | None = None, **kw: Any
    ) -> None:
        """``kw``: ``clock``, ``wall_clock``, ``hooks``, ``database``, as for
        ``BrokerWorker``."""
        super().__init__(registry, config, system=REDIS_SYSTEM, **kw)
        self.url = url
        self._r: Redis | None = None

    def connected(self) -> bool:
        """The last command on the broker connection went through (``/readyz``)."""
        return self._r is not None

    async def serve(self) -> None:
        r = self._r = await checked_client(self.url)
        blocking = await checked_client(self.url)  # the blocking reads wait on their own socket
        caps = self.config.caps()
        try:
            self.started(self.url.shown)
            lanes: list[RedisLane] = []
            for q in caps:
                for kind in (RedisLane, OrderedRedisLane):
                    lanes.append(kind(self.ctx, r, blocking, q, caps[q], self.worker_id))
            await self.together([self.run_lane(lane) for lane in lanes])
        finally:
            self._r = None
            for client in (blocking, r):
                with contextlib.suppress(Exception):
                    await client.aclose()
