"""The ring storage of ``outbox_jobs`` on PostgreSQL: when and how it rotates.

``migrate`` turns the heap into a parent partitioned by slot
(``outbox/schemas/postgresql/storage/ring.sql``; the design and its measurements:
docs/explanation/adr/0005-queue-ring-storage.md). Only the current slot is attached,
so every statement on jobs, the claim included, reads it alone; a rotation builds a new
slot table, moves every row into it and swaps the two, and the next pass drops the slot
left, so the row versions a long transaction keeps from VACUUM never pile up in front
of the claim.

Every worker on a ring runs an ``outbox.queue.upkeep.RingTicker``: a thread beside its
claims, on a connection of its own, that asks the database (``outbox_ring_rotate``) once
per ``CHECK_EVERY_S``.
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

from typing import Any

# The relations the ring adds beside outbox_jobs when it is made (storage/ring.sql);
# each rotation replaces the slot's table by the next number's.
TABLES = ("outbox_queue_ring", "outbox_jobs_ring_0")

CHECK_EVERY_S = 1.0
EVERY_MS = 2_000
MIN_DEAD = 2_000
MAX_MOVE = 5_000
LOCK_TIMEOUT = "50ms"
RECONNECT_MAX_S = 30.0


def rotate_params() -> dict[str, Any]:
    """The parameters of ``ring_rotate``."""
    return {
        "min_dead": MIN_DEAD,
        "every_ms": EVERY_MS,
        "max_move": MAX_MOVE,
        "lock_timeout": LOCK_TIMEOUT,
    }
