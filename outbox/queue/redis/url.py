"""The ``redis://`` URL: where Redis is, how to log in, how durable a handoff must be;
parsed without importing redis-py (the CLI parses ``--target`` before it knows it needs
the client).

``redis://[[user]:password@]host[:port][/db][?wait=N&wait_timeout=S&fsync=always]``, or
``rediss://`` for TLS. The port defaults to 6379, the database to 0 (a Redis Cluster has
only 0; whether the server is one is asked at connect, ``INFO server``).

The password comes from the URL or, when the URL has none, from the environment variable
``OUTBOX_REDIS_PASSWORD`` (so it stays out of process lists and shell history). It is
never shown: ``RedisUrl.shown`` is the URL as ``outbox.db.url.describe`` shows a database
URL, the password as ``***``, and an error about the URL's text never echoes it.

The durability options (``docs/how-to/redis.md``):

- ``wait=N`` (default 0): after each batch, ``WAIT N`` replicas before the outbox commits
  it; fewer within ``wait_timeout`` seconds (default 5) and the batch stays pending;
- ``fsync=always``: refuse to run unless the server says ``appendonly yes`` and
  ``appendfsync always`` (checked at every connect), so every acknowledged entry is on
  the server's disk.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from outbox.db.url import describe, make_url
from outbox.errors import ConfigurationError

SCHEMES = ("redis", "rediss")
DEFAULT_PORT = 6379
PASSWORD_ENV = "OUTBOX_REDIS_PASSWORD"
DEFAULT_WAIT_TIMEOUT = 5.0
_OPTIONS = ("wait", "wait_timeout", "fsync")


@dataclass(frozen=True, slots=True)
class RedisUrl:
    """One Redis server (or a node of a Redis Cluster), the login kept apart."""

    host: str
    port: int = DEFAULT_PORT
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    wait: int = 0
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    fsync: bool = False
    shown: str = ""

    def __repr__(self) -> str:  # never the password, even in a traceback's locals
        return f"RedisUrl({self.shown})"


def is_redis_url(value: str) -> bool:
    """True for a ``redis://`` or ``rediss://`` URL."""
    return value.split("://", 1)[0].lower() in SCHEMES


def parse_url(value: str) -> RedisUrl:
    """``redis://…`` → ``RedisUrl``; errors name the part that is wrong, never the text
    given (it may hold a password)."""
    scheme = value.split("://", 1)[0].lower()
    if "://" not in value or scheme not in SCHEMES:
        raise ConfigurationError("a Redis URL must start with redis:// or rediss://")
    try:
        url = make_url(value)
    except ValueError:  # no URL at all, or a port that is no number
        raise ConfigurationError("the Redis URL cannot be read (is its port a number?)") from None
    if not url.host:
        raise ConfigurationError("the Redis URL has no host")
    port = DEFAULT_PORT if url.port is None else url.port
    if not 0 < port < 65536:
        raise ConfigurationError("the Redis URL's port is not between 1 and 65535")
    db_text = (url.database or "").strip("/")
    if not (db_text == "" or db_text.isdigit()):
        raise ConfigurationError("the Redis URL's path must be a database number (/0)")
    unknown = sorted(set(url.query) - set(_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"the Redis URL has an unknown option {unknown[0]} (accepted: {', '.join(_OPTIONS)})"
        )
    password = url.password or os.environ.get(PASSWORD_ENV) or None
    return RedisUrl(
        host=url.host,
        port=port,
        db=int(db_text or 0),
        tls=scheme == "rediss",
        username=url.username or None,
        password=password,
        wait=_wait(url.query.get("wait")),
        wait_timeout=_wait_timeout(url.query.get("wait_timeout")),
        fsync=_fsync(url.query.get("fsync")),
        shown=describe(url.set(drivername=scheme)),
    )


def _one(name: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        raise ConfigurationError(f"the Redis URL gives option {name} more than once")
    return str(value)


def _wait(value: object) -> int:
    text = _one("wait", value)
    if text is None:
        return 0
    if not text.isdigit() or int(text) > 100:
        raise ConfigurationError("the Redis URL's wait must be a number of replicas, 0 to 100")
    return int(text)


def _wait_timeout(value: object) -> float:
    text = _one("wait_timeout", value)
    if text is None:
        return DEFAULT_WAIT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.001 <= seconds <= 600:  # nan fails too
        raise ConfigurationError("the Redis URL's wait_timeout must be seconds, 0.001 to 600")
    return seconds


def _fsync(value: object) -> bool:
    text = _one("fsync", value)
    if text is None:
        return False
    if text != "always":
        raise ConfigurationError("the Redis URL's fsync, when given, must be always")
    return True
