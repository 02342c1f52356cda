"""Wake-ups on PostgreSQL: LISTEN on a dedicated connection, in a daemon thread.

``push()`` and the relay send a payload-less ``NOTIFY outbox_jobs`` on commit; an idle
worker then claims within milliseconds instead of at its next poll. Polling stays on as
the safety net (a notification can be missed while the connection is re-made).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from outbox.db.connection import Database

log = structlog.get_logger("outbox.worker")
POLL_S = 0.1


class Listener:
    def __init__(self, database: Database, channel: str, on_notify: Callable[[], None]) -> None:
        self._database = database
        self._channel = channel
        self._on_notify = on_notify
        self._closed = threading.Event()
        self.ready = threading.Event()  # set once LISTEN is in place
        self._thread = threading.Thread(target=self._run, name="outbox-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self._listen()
            except Exception as exc:
                log.warning("worker.listen_failed", error=type(exc).__name__)
                self._closed.wait(1.0)

    def _listen(self) -> None:
        conn = self._database.connect()
        try:
            conn.execute_sql(f"LISTEN {self._channel}")
            self.ready.set()
            raw = conn.raw
            while not self._closed.is_set():
                woke = False
                for _ in raw.notifies(timeout=POLL_S, stop_after=1):
                    woke = True
                if woke:
                    self._drain(raw)
                    self._on_notify()
        finally:
            conn.close()

    @staticmethod
    def _drain(raw: object) -> None:
        """Coalesce a burst of notifications into one wake-up."""
        for _ in raw.notifies(timeout=0.0):  # type: ignore[attr-defined]
            pass

    def close(self) -> None:
        self._closed.set()
        deadline = time.monotonic() + 2 * POLL_S
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
