"""The ``nats://`` URL: servers and credentials kept apart, parsed without importing
nats-py (the CLI parses ``--target``/``--broker`` before it knows it needs the client).

``nats://host:4222[,host2:4222…]`` names one server or several of one cluster. A user
and password may sit in the first address (``nats://user:pass@host:4222``); errors and
``BrokerUrl.shown`` name the servers as ``host:port`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from outbox.errors import ConfigurationError

SCHEMES = ("nats",)


@dataclass(frozen=True, slots=True)
class BrokerUrl:
    """The servers of one NATS cluster, and credentials kept apart from them."""

    servers: tuple[str, ...]
    user: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        """The servers as ``host:port,…``: safe to print."""
        return ",".join(s.removeprefix("nats://") for s in self.servers)


def is_broker_url(value: str) -> bool:
    """True for a ``nats://`` URL (the relay's ``--target``, the worker's ``--broker``)."""
    return value.split("://", 1)[0].lower() in SCHEMES


def parse_url(value: str) -> BrokerUrl:
    """``nats://[user:pass@]h:4222[,h2:4222…]`` → ``BrokerUrl``; errors never echo the
    text given (it may hold a password)."""
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ConfigurationError(
            f"a broker URL must start with {' or '.join(s + '://' for s in SCHEMES)}"
        )
    user = password = None
    servers = []
    for i, part in enumerate(rest.rstrip("/").split(",")):
        parts = urlsplit(f"nats://{part.strip()}")
        try:
            port = parts.port or 4222
        except ValueError:
            raise ConfigurationError(
                f"broker address {i + 1} has a port that is not a number"
            ) from None
        if not parts.hostname:
            raise ConfigurationError(f"broker address {i + 1} has no host")
        if parts.path not in ("", "/") or parts.query:
            raise ConfigurationError(f"broker address {i + 1} has a path or query; give host:port")
        if parts.username is not None:
            user, password = parts.username, parts.password
        servers.append(f"nats://{parts.hostname}:{port}")
    return BrokerUrl(tuple(servers), user, password)
