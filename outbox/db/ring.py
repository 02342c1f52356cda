"""The ring storage of ``outbox_jobs`` on PostgreSQL: when and how it rotates.

``migrate`` turns the heap into a parent partitioned by slot
(``outbox/schemas/postgresql/storage/ring.sql``; the design and its measurements:
docs/explanation/adr/0005-queue-ring-storage.md). Only the current slot is attached,
so every statement on jobs, the claim included, reads it alone; a rotation builds a new
slot table, moves every row into it and swaps the two, and the next pass drops the slot
left, so the row versions a long transaction keeps from VACUUM never pile up in front
of the claim.

Every worker on a ring runs a ``Ticker``: a thread beside its claims, on a connection
of its own, that asks the database (``outbox_ring_rotate``) once per ``CHECK_EVERY_S``.
The database rotates when the current slot is ``EVERY_MS`` old and holds ``MIN_DEAD``
dead row versions, at most once per ``EVERY_MS`` whatever the number of workers (the
ring's row is locked SKIP LOCKED). A rotation builds the new slot before it takes any
lock on the queue, then waits ``LOCK_TIMEOUT`` at most for ACCESS EXCLUSIVE on
``outbox_jobs`` (every statement on jobs waits for it, never longer than that plus the
move of at most ``MAX_MOVE`` rows and a commit), and is skipped, to be tried again, when
it is busy. Off the claim loop, the building and the drop delay no claim. ``EVERY_MS``
trades those stops against the dead versions a claim walks while the horizon is held
(about the jobs of ``EVERY_MS``): under a 3-minute hold at 1,000 jobs/s, 5 s let a
claim's index scan reach 242 buffers and its p95 1.5x the minute before; 2 s, 113
buffers and 1.0x (ADR 5).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from outbox.db.reconnect import Reconnect
from outbox.log import get_logger

if TYPE_CHECKING:
    from outbox.db.connection import Connection, Database

# The relations the ring adds beside outbox_jobs when it is made (storage/ring.sql);
# each rotation replaces the slot's table by the next number's.
TABLES = ("outbox_queue_ring", "outbox_jobs_ring_0")

CHECK_EVERY_S = 1.0
EVERY_MS = 2_000
MIN_DEAD = 2_000
MAX_MOVE = 5_000
LOCK_TIMEOUT = "50ms"
RECONNECT_MAX_S = 30.0

log = get_logger("outbox.worker")


def rotate_params() -> dict[str, Any]:
    """The parameters of ``ring_rotate``."""
    return {
        "min_dead": MIN_DEAD,
        "every_ms": EVERY_MS,
        "max_move": MAX_MOVE,
        "lock_timeout": LOCK_TIMEOUT,
    }


class Ticker:
    """A pass of the rotation every ``CHECK_EVERY_S``, in a daemon thread on a
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
        reconnect = Reconnect(CHECK_EVERY_S, RECONNECT_MAX_S)
        conn: Connection | None = None
        wait = CHECK_EVERY_S
        while not self._closed.wait(wait):
            wait = CHECK_EVERY_S
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
