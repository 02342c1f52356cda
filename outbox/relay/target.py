"""Where the relay hands intents off to: the *target*.

The life of an intent::

    record() ──► pending ──relay──► handed off (to the target)
                    │  ▲
                    │  └──── outbox retry ────┐
                    └──relay──► failed ───────┘  (quarantined with a reason code)

A batch claims the oldest pending rows *by state*, under row locks (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL and MariaDB; SQLite's ``BEGIN IMMEDIATE`` writer lock), never
"rows above the highest id seen": ids are assigned at insert but become visible at
commit, so a high-water mark would skip a long transaction's rows. A row that does not
verify (``outbox.relay.verify``) is quarantined with its reason and its batch peers go on.

``SqlQueueTarget`` is the default: the queue table in the same database, in the same
transaction that marks the intents, so the handoff is exactly once (the queue's
unique ``message_id`` makes a second one fail loudly, not pass quietly).
``outbox.relay.jetstream.JetStreamTarget`` publishes to NATS JetStream instead and
deletes a row only after its PubAck (exactly once into the stream within the duplicate
window, at least once beyond it); ``outbox.relay.redis.RedisTarget`` does the same on
Redis Streams, its seen markers standing in for the duplicate window. Both hand off
through ``outbox.relay.brokered``.
"""

from __future__ import annotations

from typing import Protocol

from outbox.db.driver import Driver
from outbox.db.rows import HandoffResult, OutboxHandoff
from outbox.relay.verify import reason_for


class Target(Protocol):
    """Receives one batch of the outbox per call, inside the relay's transaction."""

    name: str

    @property
    def in_flight(self) -> int:
        """Batches it wants in flight at once (``outbox.relay.inflight``)."""
        ...

    def handoff(self, driver: Driver, batch: OutboxHandoff) -> HandoffResult:
        """Hand off up to ``batch.batch_size`` pending intents through ``driver``; one
        transaction, retried by the driver on a confirmed deadlock or BUSY; anything
        else raises ``DatabaseError`` with the batch rolled back."""
        ...

    def close(self) -> None:
        """Release what the target holds (connections to a broker)."""
        ...


class SqlQueueTarget:
    """The SQL queue table (``outbox_jobs``) in the relay's own database."""

    name = "sql"
    in_flight = 1  # one statement per batch: nothing to wait for that a second batch could hide

    def handoff(self, driver: Driver, batch: OutboxHandoff) -> HandoffResult:
        """Move up to ``batch.batch_size`` verified intents into ``outbox_jobs`` and delete
        them from the outbox, in one statement plan of the driver's, one transaction."""
        return driver.outbox_handoff(batch, reason_for)

    def close(self) -> None:
        """Nothing to release: the SQL queue uses the relay's own connection."""
