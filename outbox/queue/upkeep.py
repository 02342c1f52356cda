"""A worker's upkeep of its queue's storage, beside its claims: on PostgreSQL's ring
(``outbox.db.ring``), the rotation. The worker starts it after its first claim round,
only when the database is a ring (``Settler.start_upkeep``)."""

from __future__ import annotations

import threading

from outbox.db import ring
from outbox.db.connection import Connection, Database
from outbox.db.reconnect import Reconnect
from outbox.log import get_logger

log = get_logger("outbox.worker")


class RingTicker:
    """A pass of the ring's rotation every ``ring.CHECK_EVERY_S``, in a daemon thread on a
    connection of its own, so that no claim waits for a pass (the building of the next
    slot, the drop of the last) and a slow pass leaves the worker's loop alone. A pass
    that fails drops the connection (the driver logs its class); the next pass opens
    another, with ``outbox.db.reconnect``'s backoff."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outbox-ring", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reconnect = Reconnect(ring.CHECK_EVERY_S, ring.RECONNECT_MAX_S)
        conn: Connection | None = None
        wait = ring.CHECK_EVERY_S
        while not self._closed.wait(wait):
            wait = ring.CHECK_EVERY_S
            try:
                conn = conn or self._database.connect()
                answer = conn.driver.ring_rotate()
            except Exception as exc:  # connect failed: try again later
                answer = None
                wait = max(wait, reconnect.pause(exc))
                log.warning("worker.ring_connect_failed", error=type(exc).__name__)
            if answer is None:
                if conn is not None:
                    conn.close()
                conn = None
            else:
                reconnect.working()
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5.0)
