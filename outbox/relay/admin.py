"""Operator actions on the outbox: status, the quarantine list, retry and prune.

Nothing here returns or logs a payload: status and lists carry ids, counts, reason
codes and times only. ``retry`` reads a payload to re-verify it, inside the database
transaction that requeues it, and never echoes it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

import structlog

from outbox.db.connection import Connection
from outbox.errors import (
    InvalidJob,
    InvalidMessageId,
    MessageNotFound,
    RetryRefused,
)
from outbox.ids import is_message_id
from outbox.relay.verify import StoredIntent, reason_for, refingerprint

log = structlog.get_logger("outbox.relay")

DAY_MS = 86_400_000
# The version of ``Status.as_dict``'s shape (``outbox status --json``). Adding a key keeps
# it; renaming, removing or retyping one bumps it. README: "outbox status --json".
STATUS_SCHEMA_VERSION = 1
PRUNE_BATCH = 500
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OutboxCounts:
    """Intents by state; the oldest pending one's age in seconds (None when none is).

    ``unknown_state`` counts rows whose state is none of the three (edited by hand or by
    a newer version): the relay never touches them, so they must at least be seen.
    """

    pending: int = 0
    published: int = 0
    failed: int = 0
    unknown_state: int = 0
    oldest_pending_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's jobs: due and free, not yet due, leased to a worker, dead-lettered."""

    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    dead: int = 0


@dataclass(frozen=True, slots=True)
class Status:
    """Counts by state, the oldest pending intent's age, and per-queue job counts."""

    outbox: OutboxCounts
    queues: dict[str, QueueCounts] = field(default_factory=dict)

    @property
    def dead(self) -> int:
        """Dead letters in every queue."""
        return sum(q.dead for q in self.queues.values())

    def as_dict(self) -> dict[str, Any]:
        """The shape ``outbox status --json`` prints, version ``STATUS_SCHEMA_VERSION``."""
        return {
            "schema_version": STATUS_SCHEMA_VERSION,
            "outbox": asdict(self.outbox),
            "queues": {name: asdict(q) for name, q in sorted(self.queues.items())},
        }


@dataclass(frozen=True, slots=True)
class FailedIntent:
    """One quarantined intent as ``outbox failed`` lists it: no payload, by design."""

    message_id: str
    reason: str | None
    created_at_ms: int
    failed_at_ms: int | None


_KNOWN_STATES = frozenset({"pending", "published", "failed"})


def status(conn: Connection) -> Status:
    """Read the counts; every age comes from the database's clock."""
    return conn.read(_status, operation="status")


def _status(conn: Connection) -> Status:
    by_state = {str(s): int(n) for s, n in conn.execute("status_state_counts")}
    oldest, now_ms = conn.execute("status_oldest_pending")[0]
    age = None if oldest is None else round(max(0, int(now_ms) - int(oldest)) / 1000, 3)
    counts = OutboxCounts(
        pending=by_state.get("pending", 0),
        published=by_state.get("published", 0),
        failed=by_state.get("failed", 0),
        unknown_state=sum(n for s, n in by_state.items() if s not in _KNOWN_STATES),
        oldest_pending_age_s=age,
    )
    queues: dict[str, dict[str, int]] = {}
    for name, ready, delayed, reserved, _oldest_ready in conn.execute("queue_counts"):
        queues[str(name)] = {
            "ready": int(ready),
            "delayed": int(delayed),
            "reserved": int(reserved),
        }
    for name, dead in conn.execute("dead_counts"):
        queues.setdefault(str(name), {})["dead"] = int(dead)
    return Status(counts, {name: QueueCounts(**q) for name, q in queues.items()})


def pending_count(conn: Connection) -> int:
    """How many intents are pending (sizes the CLI's progress bar)."""
    return conn.read(lambda c: int(c.execute("status_pending_count")[0][0]), operation="status")


def failed(conn: Connection, limit: int = 50) -> list[FailedIntent]:
    """Quarantined intents, oldest first: id, reason code and times, never the payload."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    rows = conn.read(lambda c: c.execute("failed_list", {"limit": limit}), operation="failed")
    return [FailedIntent(str(m), r, int(c), None if f is None else int(f)) for m, r, c, f in rows]


def retry(
    conn: Connection, message_id: str, *, accept_current: bool = False
) -> Literal["requeued", "accepted"]:
    """Return a quarantined intent to pending once it verifies again.

    With ``accept_current`` the row's present contents are accepted: the payload is
    rewritten canonically and the fingerprint recomputed. Its names and JSON must still
    be valid. A producer replaying the original job under the same key afterwards gets
    ``IdempotencyConflict`` if the contents differ from what it recorded.
    """
    if not isinstance(message_id, str) or not is_message_id(message_id):
        raise InvalidMessageId(
            "not a message id: expected a UUID like 01890a5d-ac96-774b-bcce-b302099a8057"
        )
    # Ids are stored in lower case; PostgreSQL compares case-sensitively, MariaDB does not.
    wanted = message_id.lower()
    return conn.transact(lambda c: _retry(c, wanted, accept_current), operation="retry")


def _retry(
    conn: Connection, message_id: str, accept_current: bool
) -> Literal["requeued", "accepted"]:
    rows = conn.execute("retry_lookup", {"message_id": message_id})
    if not rows:
        raise MessageNotFound(f"no outbox message {message_id}")
    row_id, _, state, *columns = rows[0]
    if state != "failed":
        raise RetryRefused(f"message {message_id} is {state}, not failed; only failed ones retry")
    intent = StoredIntent(row_id, message_id, *columns)
    if not accept_current:
        reason = reason_for(intent)
        if reason is not None:
            raise RetryRefused(
                f"message {message_id} still does not verify ({reason}); repair the row, or "
                "pass --accept-current to accept its current contents and re-fingerprint it"
            )
        conn.execute_count("retry_requeue", {"id": row_id})
        log.info("relay.retry", message_id=message_id, accepted=False)
        return "requeued"
    try:
        payload, fingerprint = refingerprint(intent)
    except InvalidJob as exc:
        raise RetryRefused(
            f"message {message_id}: its current contents cannot be accepted ({exc})"
        ) from None
    params = {"id": row_id, "payload": payload, "fingerprint": fingerprint}
    conn.execute_count("retry_accept", params)
    log.info("relay.retry", message_id=message_id, accepted=True)
    return "accepted"


def prune(
    conn: Connection,
    days: int,
    limit: int = 1_000,
    *,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete at most ``limit`` published tombstones published ``days`` or more days ago.

    Oldest first, ``batch`` rows per short transaction so no lock is held for long.
    Pending and failed intents are never touched. Deleting a tombstone ends
    deduplication for its key: recording the same key again creates a new intent.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError("days must be a whole number >= 0")
    if limit < 1 or batch < 1:
        raise ValueError("limit and batch must be at least 1")
    deleted = 0
    while deleted < limit:
        want = min(batch, limit - deleted)
        n = _prune_batch(conn, days * DAY_MS, want)
        deleted += n
        log.info("prune.batch", deleted=n)
        if progress is not None:
            progress(n)
        if n < want:
            break
    return deleted


def _prune_batch(conn: Connection, age_ms: int, size: int) -> int:
    params = {"age_ms": age_ms, "batch": size}
    return conn.transact(lambda c: c.execute_count("prune_batch", params), operation="prune")


__all__ = [
    "STATUS_SCHEMA_VERSION",
    "FailedIntent",
    "OutboxCounts",
    "QueueCounts",
    "Status",
    "failed",
    "pending_count",
    "prune",
    "retry",
    "status",
]
