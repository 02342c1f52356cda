"""The broker inbox's statements (``outbox_inbox``; the policy is ``outbox.queue.broker.inbox``).

They run on an ``outbox.db.Connection`` inside the caller's transaction, like every
named statement, so the seam keeps the SQL and the JetStream worker keeps the decisions.
"""

from __future__ import annotations

from outbox.db.connection import Connection


def claim(c: Connection, message_id: str, queue: str) -> bool:
    """Insert ``message_id``; False when a committed run already holds it."""
    return c.execute_count("inbox_claim", {"message_id": message_id, "queue": queue}) > 0


def seen(c: Connection, message_id: str) -> bool:
    """Is ``message_id`` in the inbox?"""
    return bool(c.execute("inbox_seen", {"message_id": message_id}))


def prune_batch(c: Connection, age_ms: int, batch: int) -> int:
    """Delete at most ``batch`` ids handled ``age_ms`` ago or more; how many went."""
    return c.execute_count("inbox_prune", {"age_ms": age_ms, "batch": batch})
