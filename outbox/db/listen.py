"""Wake-ups on PostgreSQL: LISTEN on a dedicated connection, in a daemon thread.

One helper serves the relay (channel ``outbox_relay``, notified by ``record()``) and the
worker (``outbox_jobs``, notified by ``push()`` and the relay's handoffs). A
notification is only a hint that work *may* be waiting: NOTIFY is lost across
reconnects and does not pass PgBouncer's transaction pooling, so the owner keeps
polling either way; a notification only makes it look sooner. Losing the connection is
logged and repaired (``outbox.db.reconnect``: at once after a listening connection is
lost, with backoff while reconnecting fails); each time LISTEN is (re)established the
owner is woken once, for whatever was committed while nobody was listening.

The thread waits on the connection's socket and on one end of a socket pair, so
``close()`` wakes it at once instead of after a timeout.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

from outbox.db.connection import Database
from outbox.db.reconnect import Reconnect
from outbox.log import get_logger

POLL_S = 1.0  # a safety net only: close() wakes the thread at once
RECONNECT_MIN_S = 0.5


class Listener:
    """LISTEN on ``channel`` in a daemon thread; ``on_notify`` runs there for each burst.

    ``owner`` prefixes the log events (``relay.listening``, ``worker.listen_lost``).
    """

    def __init__(
        self,
        database: Database,
        channel: str,
        on_notify: Callable[[], None],
        *,
        owner: str,
        reconnect_max: float = 30.0,
    ) -> None:
        self._database = database
        self._channel = channel
        self._on_notify = on_notify
        self._log = get_logger(f"outbox.{owner}")
        self._owner = owner
        self._reconnect_max = reconnect_max
        self._closed = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.ready = threading.Event()  # set once LISTEN is in place
        self._thread = threading.Thread(target=self._run, name="outbox-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reconnect = Reconnect(RECONNECT_MIN_S, self._reconnect_max)
        try:
            while not self._closed.is_set():
                try:
                    self._listen(reconnect)
                except Exception as exc:
                    pause = reconnect.pause(exc)
                    self._log.warning(
                        f"{self._owner}.listen_lost", error=type(exc).__name__, retry_in_s=pause
                    )
                    if pause:
                        self._closed.wait(pause)
        finally:
            self._wake_r.close()

    def _listen(self, reconnect: Reconnect) -> None:
        conn = self._database.connect()
        try:
            conn.execute(conn.driver.listen_statement(self._channel))
            reconnect.working()
            self.ready.set()
            self._log.info(f"{self._owner}.listening")
            self._on_notify()  # whatever was committed while we were not listening
            raw = conn.raw
            with selectors.DefaultSelector() as sel:
                sel.register(raw.fileno(), selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._closed.is_set():
                    sel.select(POLL_S)
                    if self._closed.is_set():
                        return
                    if _arrived(raw):
                        self._on_notify()
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread and wait for it (it closes its connection); safe to repeat."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):  # the thread may have gone already
            self._wake_w.send(b"x")
        self._wake_w.close()
        self._thread.join(timeout=2.0)


def _arrived(raw: Any) -> bool:
    """Take every notification that is here: read from the socket, or kept by psycopg
    from an earlier read (the socket is not readable for those). Several commits'
    worth are one wake-up. A dropped connection raises here."""
    arrived = False
    for _ in raw.notifies(timeout=0.0):
        arrived = True
    return arrived
