"""Measured children for ``s_redis``: the relay to Redis Streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.w_nats import relay_work


def relay(
    url: str, batch: int, redis: str, in_flight: int | None = None
) -> Callable[[], dict[str, Any]]:
    """The relay with the Redis target (its defaults, or ``in_flight`` batches at once),
    connected and its script loaded before GO, as the SQL relay beside it."""
    from outbox.db.connection import Database
    from outbox.queue.redis.url import parse_url
    from outbox.relay import Relay, RelayConfig
    from outbox.relay.redis import RedisSettings, RedisTarget

    settings = RedisSettings() if in_flight is None else RedisSettings(in_flight=in_flight)
    target = RedisTarget(parse_url(redis), settings)
    target.open()
    return relay_work(Relay(Database(url), RelayConfig(batch_size=batch), target=target))
