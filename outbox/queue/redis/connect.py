"""Connecting to Redis: one check at connect, errors that never show a password.

``connect`` (the synchronous relay) and ``connect_async`` (the asyncio broker worker and
``queue --broker``; ``checked_client`` is its client alone) open a client for a
``RedisUrl`` and ask the server once, with ``INFO server``, what it is:

- its version: below 6.2 (no ``XAUTOCLAIM``, no ``XADD NOMKSTREAM``) is refused in one line
  at start, not met later as an unknown command;
- standalone or a Redis Cluster (``redis_mode``): a cluster gets redis-py's cluster client,
  which routes each queue's keys (one hash tag, ``outbox.queue.redis.names``) to their node;
- its durability settings (``CONFIG GET``, when granted): with ``fsync=always`` in the URL
  it must say ``appendonly yes`` and ``appendfsync always``, or the relay does not start
  (``docs/how-to/redis.md``); ``maxmemory-policy`` is reported, since an ``allkeys-*``
  policy lets Redis evict a stream of unread jobs.

Every failure becomes a ``BrokerError`` naming the URL as ``RedisUrl.shown`` (password as
``***``) and the exception's class, never its text: a wrong password is one line and
exit 1, as a database that refuses the login is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from outbox.errors import BrokerError, ConfigurationError, OutboxError
from outbox.log import get_logger
from outbox.queue.redis.url import RedisUrl, is_redis_url, parse_url

log = get_logger("outbox.redis")
MIN_VERSION = (6, 2)
__all__ = [
    "MIN_VERSION",
    "Connected",
    "RedisUrl",
    "broker_error",
    "checked_client",
    "client",
    "connect",
    "connect_async",
    "is_redis_url",
    "parse_url",
]


@dataclass(slots=True)
class Connected:
    """A checked client and what the server said about itself."""

    url: RedisUrl
    client: Any  # redis.Redis, redis.cluster.RedisCluster, or their asyncio twins
    version: str
    cluster: bool
    durability: dict[str, str] = field(default_factory=dict)  # appendonly, appendfsync, ...

    def node(self, key: str) -> redis.Redis:
        """A client of the node holding ``key`` (the client itself when standalone): a
        queue's script and the ``WAIT`` after it run on this one connection's server."""
        if not self.cluster:
            return self.client  # type: ignore[no-any-return]
        c: RedisCluster = self.client
        return c.get_redis_connection(c.get_node_from_key(key))  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.client.close()


def options(url: RedisUrl, timeout: float) -> dict[str, Any]:
    """The client keyword arguments of ``url`` (shared by both clients)."""
    return {
        "host": url.host,
        "port": url.port,
        "username": url.username,
        "password": url.password,
        "ssl": url.tls,
        "socket_timeout": timeout,
        "socket_connect_timeout": min(timeout, 5.0),
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.1), 2),
        "client_name": "outbox",
    }


def connect(url: RedisUrl, *, timeout: float = 10.0) -> Connected:
    """A checked synchronous client, or ``BrokerError``/``ConfigurationError`` in one line."""
    plain = redis.Redis(db=url.db, **options(url, timeout))
    try:
        info = plain.info("server")
        cluster = _check(url, info)
        durability = _durability(url, plain)
        if not cluster:
            return Connected(url, plain, str(info["redis_version"]), False, durability)
        plain.close()
        client = RedisCluster(**options(url, timeout))
        client.ping()
        return Connected(url, client, str(info["redis_version"]), True, durability)
    except redis.RedisError as exc:
        plain.close()
        raise broker_error(url, exc) from None
    except OutboxError:
        plain.close()
        raise


async def connect_async(url: RedisUrl, *, timeout: float = 10.0) -> Connected:
    """``connect`` for asyncio (redis-py's asyncio clients), with the same checks."""
    plain = redis.asyncio.Redis(db=url.db, **_async_options(url, timeout))
    try:
        info = await plain.info("server")
        cluster = _check(url, info)
        durability = _read_durability(url, await _config_get(plain))
        if not cluster:
            return Connected(url, plain, str(info["redis_version"]), False, durability)
        await plain.aclose()
        client = redis.asyncio.RedisCluster(**_async_options(url, timeout))
        await client.ping()
        return Connected(url, client, str(info["redis_version"]), True, durability)
    except redis.RedisError as exc:
        await plain.aclose()
        raise broker_error(url, exc) from None
    except OutboxError:
        await plain.aclose()
        raise


async def checked_client(url: RedisUrl) -> Any:
    """``connect_async``'s client (bytes in, bytes out: an entry that is not ours may hold
    anything)."""
    return (await connect_async(url)).client


def client(url: RedisUrl, *, timeout: float = 10.0) -> Any:
    """An asyncio client of ``url``, unchecked (a metrics scrape asks little of it)."""
    return redis.asyncio.Redis(db=url.db, **_async_options(url, timeout))


def _async_options(url: RedisUrl, timeout: float) -> dict[str, Any]:
    from redis.asyncio.retry import Retry as AsyncRetry

    return {**options(url, timeout), "retry": AsyncRetry(ExponentialBackoff(1.0, 0.1), 2)}


def broker_error(url: RedisUrl, exc: redis.RedisError) -> BrokerError:
    """``exc`` as one line naming the URL without its password (and no server text)."""
    name = type(exc).__name__
    if isinstance(exc, redis.AuthenticationError) or _is_auth(exc):
        return BrokerError(f"Redis at {url.shown}: authentication failed ({name})")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return BrokerError(
            f"cannot reach Redis at {url.shown} ({name}); is redis-server running?",
            transient=True,
        )
    return BrokerError(f"Redis at {url.shown} refused a command ({name})", transient=True)


def _is_auth(exc: redis.RedisError) -> bool:
    text = str(exc).split(" ", 1)[0].upper()
    return text in ("WRONGPASS", "NOAUTH", "NOPERM")


def _check(url: RedisUrl, info: dict[str, Any]) -> bool:
    """The version check; True for a Redis Cluster node."""
    version = str(info.get("redis_version", "0"))
    if _parts(version) < MIN_VERSION:
        raise ConfigurationError(
            f"Redis at {url.shown} is version {version}: outbox needs Redis 6.2 or later "
            "(XAUTOCLAIM, XADD NOMKSTREAM)"
        )
    cluster = info.get("redis_mode") == "cluster"
    if cluster and url.db != 0:
        raise ConfigurationError(
            f"Redis at {url.shown} is a Redis Cluster, which has database 0 only"
        )
    return cluster


def _parts(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


_SETTINGS = ("appendonly", "appendfsync", "maxmemory-policy")


def _durability(url: RedisUrl, client: redis.Redis) -> dict[str, str]:
    try:
        found = client.config_get(*_SETTINGS)
    except redis.ResponseError:  # CONFIG renamed or not granted (a managed Redis)
        found = {}
    return _read_durability(url, found)


async def _config_get(client: redis.asyncio.Redis) -> dict[Any, Any]:
    try:
        return await client.config_get(*_SETTINGS)
    except redis.ResponseError:
        return {}


def _read_durability(url: RedisUrl, found: dict[Any, Any]) -> dict[str, str]:
    """``appendonly``, ``appendfsync`` and ``maxmemory-policy`` as the server says them;
    with ``fsync=always`` anything but ``yes``/``always`` (or a server that will not say)
    is refused."""
    d = {_text(k): _text(v) for k, v in found.items()}
    d = {k: d[k] for k in _SETTINGS if k in d}
    if url.fsync and (d.get("appendonly") != "yes" or d.get("appendfsync") != "always"):
        said = ", ".join(f"{k} {d[k]}" for k in _SETTINGS[:2] if k in d) or "CONFIG GET refused"
        raise ConfigurationError(
            f"Redis at {url.shown} is not set to fsync every write ({said}); fsync=always "
            "needs appendonly yes and appendfsync always"
        )
    return d


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
