"""``outbox relay --target redis://…``: the Redis Streams target from the relay's options.

The relay's stream options (``outbox.cli.broker.target_options``) mean the same here:
``--duplicate-window`` is how long a seen marker lives, ``--stream-max-msgs`` the most
entries one stream holds, ``--publish-timeout`` and ``--in-flight`` as on NATS. The
NATS-only ones (``--provisioning``, ``--stream-max-bytes``, ``--replicas``) are refused
when given another value than their default: Redis makes streams on the first ``XADD``,
and waits for replicas with the URL's ``?wait=N`` (``docs/how-to/redis.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from outbox.errors import ConfigurationError
from outbox.queue.redis.url import is_redis_url, parse_url

if TYPE_CHECKING:
    from outbox.relay.redis import RedisTarget

__all__ = ["is_redis_url", "make_target"]


def require_client() -> None:
    """redis-py is the ``redis`` extra: without it, one line saying how to get it."""
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "Redis needs the redis extra: pip install 'outbox-relay[redis]'"
        ) from None


def make_target(
    target: str,
    provisioning: str,
    duplicate_window: float,
    stream_max_msgs: int,
    stream_max_bytes: int,
    replicas: int,
    publish_timeout: float,
    in_flight: int,
    reconnect_max: float,
) -> RedisTarget:
    """The relay's Redis target from its options, connected and checked."""
    for option, given, default in (
        ("--provisioning", provisioning, "create"),
        ("--stream-max-bytes", stream_max_bytes, -1),
        ("--replicas", replicas, 1),
    ):
        if given != default:
            raise click.UsageError(
                f"{option} goes with --target nats:// only (on Redis, wait for replicas "
                "with ?wait=N in the URL)"
            )
    if stream_max_msgs == 0:
        raise click.BadParameter(
            "with redis:// it is -1 (no limit) or at least 1", param_hint="--stream-max-msgs"
        )
    try:
        url = parse_url(target)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    require_client()
    from outbox.relay.redis import RedisSettings, RedisTarget

    settings = RedisSettings(
        dedupe_window=duplicate_window,
        max_len=max(stream_max_msgs, 0),
        publish_timeout=publish_timeout,
        in_flight=in_flight,
    )
    redis_target = RedisTarget(url, settings, reconnect_max=reconnect_max)
    redis_target.open()
    return redis_target
