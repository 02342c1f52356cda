"""The broker clients are extras: without one, a line saying which to install."""

from __future__ import annotations

from outbox.errors import ConfigurationError


def require_client() -> None:
    """nats-py is the ``nats`` extra: without it, one line saying how to get it."""
    try:
        import nats  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "NATS needs the nats extra: pip install 'outbox-relay[nats]'"
        ) from None


def require_redis_client() -> None:
    """redis-py is the ``redis`` extra: without it, one line saying how to get it."""
    try:
        import redis  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "Redis needs the redis extra: pip install 'outbox-relay[redis]'"
        ) from None
