"""The ``redis://`` URL of the broker worker and ``queue --broker``, and its client.

``redis://[user:password@]host:port/db`` or ``rediss://…`` (TLS); a password not in the
URL may come from ``OUTBOX_REDIS_PASSWORD``. ``RedisUrl.shown`` and every error name the
server as ``redis://host:port/db``, never the password. Parsing imports no client (the
CLI parses ``--broker`` before it knows it needs the extra).

``connect`` opens a redis-py asyncio client and checks, once at start, what the worker
needs: the server answers, takes the login, and is at least 6.2 (``XAUTOCLAIM``, which
takes back the entries of a worker that died). Each failure is one ``BrokerError`` line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from outbox.errors import BrokerError, ConfigurationError

if TYPE_CHECKING:
    from redis.asyncio import Redis

SCHEMES = ("redis", "rediss")
PASSWORD_ENV = "OUTBOX_REDIS_PASSWORD"
LEAST_VERSION = (6, 2)


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """One Redis server (or a cluster's entry node) and credentials kept apart."""

    host: str
    port: int = 6379
    db: int = 0
    tls: bool = False
    user: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        """``redis[s]://host:port/db``: safe to print."""
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.db}"


def is_redis_url(value: str) -> bool:
    return value.split("://", 1)[0].lower() in SCHEMES


def parse_url(value: str) -> RedisUrl:
    """``redis[s]://[user:pass@]host[:port][/db]`` → ``RedisUrl``; errors never echo the
    text given (it may hold a password)."""
    scheme, sep, _ = value.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ConfigurationError("a Redis URL must start with redis:// or rediss://")
    parts = urlsplit(value)
    try:
        port = parts.port or 6379
    except ValueError:
        raise ConfigurationError("the Redis URL has a port that is not a number") from None
    if not parts.hostname:
        raise ConfigurationError("the Redis URL has no host")
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit() or parts.query:
        raise ConfigurationError("the Redis URL's path must be a database number (/0)")
    password = unquote(parts.password) if parts.password else os.environ.get(PASSWORD_ENV)
    user = unquote(parts.username) if parts.username else None
    return RedisUrl(
        parts.hostname, port, int(db_text), scheme.lower() == "rediss", user, password or None
    )


def client(url: RedisUrl) -> Redis:
    """A redis-py asyncio client (bytes in, bytes out: an entry that is not ours may
    hold anything)."""
    from redis.asyncio import Redis

    return Redis(
        host=url.host,
        port=url.port,
        db=url.db,
        username=url.user,
        password=url.password,
        ssl=url.tls,
        socket_connect_timeout=5,
    )


async def connect(url: RedisUrl) -> Redis:
    """A client whose server answered, took the login and has ``XAUTOCLAIM``."""
    from redis import exceptions

    r = client(url)
    try:
        info = await r.info("server")
    except exceptions.AuthenticationError:
        await r.aclose()
        raise BrokerError(_refused(url)) from None
    except exceptions.ResponseError as exc:
        await r.aclose()
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise BrokerError(_refused(url)) from None
        raise BrokerError(f"Redis at {url.shown} refused INFO ({type(exc).__name__})") from None
    except (exceptions.ConnectionError, exceptions.TimeoutError, OSError) as exc:
        await r.aclose()
        raise BrokerError(
            f"no Redis server answered at {url.shown} ({type(exc).__name__})", transient=True
        ) from None
    version = str(info.get("redis_version", "0"))
    if _version(version) < LEAST_VERSION:
        await r.aclose()
        raise BrokerError(
            f"Redis at {url.shown} is version {version}; the broker worker needs 6.2 or later "
            "(XAUTOCLAIM takes back the jobs of a worker that died)"
        )
    return r


def _refused(url: RedisUrl) -> str:
    return f"Redis at {url.shown} refused the login (check the password)"


def _version(text: str) -> tuple[int, int]:
    fields = [*text.split("."), "0", "0"][:2]
    try:
        return int(fields[0]), int(fields[1])
    except ValueError:
        return (0, 0)
