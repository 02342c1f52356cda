"""Waiting between polls: on a LISTEN connection (PostgreSQL) or on the clock alone.

A notification is only a hint that work *may* be waiting: NOTIFY is lost across
reconnects and does not pass PgBouncer's transaction pooling. So a waiter never decides
*whether* to look, only *how soon*: it returns early on a notification and otherwise at
the timeout, and the relay polls either way. Losing the LISTEN connection is logged and
repaired with backoff while the relay keeps polling; once it listens again it wakes the
relay at once, for whatever was committed while nobody was listening.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

import structlog

from outbox.db.connection import Connection, Database

log = structlog.get_logger("outbox.relay")

# How long one blocking wait on the LISTEN socket may last, so ``stop`` is seen promptly.
WAIT_SLICE_S = 0.25
RECONNECT_MIN_S = 0.5


class Waiter(Protocol):
    """How the relay waits between polls; ``close`` releases what the waiter holds."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; return early (True) on a wake-up or once ``stop`` is set."""
        ...

    def close(self) -> None: ...


class PollWaiter:
    """Poll-only: the clock (and ``stop``) are the only wake-ups."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        return stop.wait(timeout)

    def close(self) -> None:
        pass


class ListenWaiter:
    """LISTENs on ``channel`` over a dedicated connection, reconnecting with backoff."""

    def __init__(self, database: Database, channel_statement: str, reconnect_max: float) -> None:
        self._database = database
        self._statement = channel_statement
        self._reconnect_max = reconnect_max
        self._conn: Connection | None = None
        self._retry_at = 0.0
        self._pause = RECONNECT_MIN_S
        self._caught_up = True  # False from a (re)connect until that wake-up is given

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            conn = self._connected()
            if conn is not None and not self._caught_up:
                self._caught_up = True
                return True
            if conn is None:
                if stop.wait(min(WAIT_SLICE_S, left)):
                    return True
            elif self._notified(conn, min(WAIT_SLICE_S, left)):
                return True
        return True

    def _connected(self) -> Connection | None:
        if self._conn is not None or time.monotonic() < self._retry_at:
            return self._conn
        conn: Connection | None = None
        try:
            conn = self._database.connect()
            conn.execute(self._statement)
        except Exception as exc:
            if conn is not None:  # connected, but LISTEN failed: do not leak the session
                conn.close()
            self._schedule_reconnect(exc)
            return None
        self._conn, self._pause, self._caught_up = conn, RECONNECT_MIN_S, False
        log.info("relay.listening")
        return conn

    def _notified(self, conn: Connection, timeout: float) -> bool:
        try:
            got = any(True for _ in conn.raw.notifies(timeout=timeout, stop_after=1))
            if got:  # several commits may have notified; one batch serves them all
                for _ in conn.raw.notifies(timeout=0.0):
                    pass
            return got
        except Exception as exc:
            self._drop()
            self._schedule_reconnect(exc)
            return False

    def _schedule_reconnect(self, exc: Exception) -> None:
        log.warning("relay.listen_lost", error=type(exc).__name__, retry_in_s=self._pause)
        self._retry_at = time.monotonic() + self._pause
        self._pause = min(self._pause * 2, self._reconnect_max)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._drop()
