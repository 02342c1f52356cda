"""Wake-ups on PostgreSQL: LISTEN on a dedicated connection, in a daemon thread.

``push()`` and the relay send a payload-less ``NOTIFY outbox_jobs`` on commit; an idle
worker then claims within milliseconds instead of at its next poll. Polling stays on as
the safety net; and each time LISTEN is (re)established the worker is woken once, for
whatever was committed while nobody was listening.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

import structlog

from outbox.db.connection import Database

log = structlog.get_logger("outbox.worker")
POLL_S = 1.0  # a safety net only: close() wakes the thread at once


class Listener:
    """LISTEN in a daemon thread; ``on_notify`` runs there for each burst of notifications.

    The thread waits on the connection's socket and on one end of a socket pair, so
    ``close()`` wakes it at once instead of after a poll timeout: a worker that stops
    (``stop_when_empty``, a test, a deploy) is not held up by its listener.
    """

    def __init__(self, database: Database, channel: str, on_notify: Callable[[], None]) -> None:
        self._database = database
        self._channel = channel
        self._on_notify = on_notify
        self._closed = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.ready = threading.Event()  # set once LISTEN is in place
        self._thread = threading.Thread(target=self._run, name="outbox-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._closed.is_set():
                try:
                    self._listen()
                except Exception as exc:
                    log.warning("worker.listen_failed", error=type(exc).__name__)
                    self._closed.wait(1.0)
        finally:
            self._wake_r.close()

    def _listen(self) -> None:
        conn = self._database.connect()
        try:
            conn.execute_sql(f"LISTEN {self._channel}")
            self.ready.set()
            self._on_notify()  # whatever was committed while we were not listening
            raw = conn.raw
            with selectors.DefaultSelector() as sel:
                sel.register(raw.fileno(), selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._closed.is_set():
                    sel.select(POLL_S)
                    if self._closed.is_set():
                        return
                    if self._arrived(raw):
                        self._on_notify()
        finally:
            conn.close()

    @staticmethod
    def _arrived(raw: Any) -> bool:
        """Take every notification that is here: read from the socket, or kept by psycopg
        from an earlier read (the socket is not readable for those). Several commits'
        worth are one wake-up. A dropped connection raises here."""
        arrived = False
        for _ in raw.notifies(timeout=0.0):
            arrived = True
        return arrived

    def close(self) -> None:
        """Stop the thread and wait for it (it closes its connection); safe to repeat."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):  # the thread may have gone already
            self._wake_w.send(b"x")
        self._wake_w.close()
        self._thread.join(timeout=2.0)
