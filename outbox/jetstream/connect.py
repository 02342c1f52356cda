"""Connecting to NATS: the URL, a quiet client, and a bridge for synchronous callers.

``nats://host:4222[,host2:4222…]`` names one server or several of one cluster. A user
and password may sit in the first address (``nats://user:pass@host:4222``); every
message we print names the servers as ``host:port`` only, so no credential reaches a
log or a terminal.

nats-py's defaults suit a long-lived service, not a CLI: its default error callback
prints a traceback for every failed connection attempt, and it reconnects forever. We
pass callbacks that log one line by class name, bound the reconnect attempts, and keep
the connect timeout short, so an unreachable URL ends in one line and exit 1.

``Broker`` runs one event loop on a daemon thread and lets the synchronous relay and
CLI call coroutines on it (``broker.call(coro)``); the worker is asyncio itself and
uses ``connect`` directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext

from outbox.errors import BrokerError
from outbox.jetstream.url import BrokerUrl, is_broker_url, parse_url
from outbox.log import get_logger

log = get_logger("outbox.jetstream")
T = TypeVar("T")
__all__ = ["Broker", "BrokerUrl", "connect", "is_broker_url", "parse_url"]


async def _quiet_error(exc: Exception) -> None:
    log.debug("nats.error", error=type(exc).__name__)


async def _quiet_event() -> None:
    log.debug("nats.connection_event")


async def connect(
    url: BrokerUrl, *, timeout: float = 2.0, reconnects: int = 3, name: str = "outbox"
) -> Client:
    """A connected client, or ``BrokerError`` naming the servers (never the password)."""
    refused = [False]  # nats-py reports a refused login only to the error callback

    async def on_error(exc: Exception) -> None:
        refused[0] = refused[0] or "authorization violation" in str(exc).lower()
        await _quiet_error(exc)

    try:
        return await nats.connect(
            servers=list(url.servers),
            user=url.user,
            password=url.password,
            name=name,
            connect_timeout=max(1, round(timeout)),
            reconnect_time_wait=1,
            max_reconnect_attempts=reconnects,
            allow_reconnect=True,
            error_cb=on_error,
            disconnected_cb=_quiet_event,
            reconnected_cb=_quiet_event,
            closed_cb=_quiet_event,
        )
    except Exception as exc:
        if refused[0]:
            raise BrokerError(f"NATS at {url.shown}: authentication failed") from None
        raise BrokerError(
            f"cannot reach NATS at {url.shown} ({type(exc).__name__}); is nats-server running "
            "with JetStream (-js)?",
            transient=True,
        ) from exc


class Broker:
    """One NATS connection on its own event-loop thread, for synchronous callers."""

    def __init__(self, url: BrokerUrl, *, timeout: float = 2.0, reconnects: int = 3) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="outbox-nats"
        )
        self._thread.start()
        try:
            self.nc = self.call(connect(url, timeout=timeout, reconnects=reconnects), None)
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run ``coro`` on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        if not self._loop.is_closed():
            try:
                self.call(self.nc.close(), 5.0)
            except Exception:
                log.debug("nats.close_failed")
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
