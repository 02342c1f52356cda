"""What ``outbox status`` and ``outbox queue stats`` report: counts, never payloads.

One place for the counts of both halves: the outbox (intents by state, the oldest
pending one's age) and the queues (ready, delayed, reserved, dead). Every age comes
from the database's clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from outbox.db import keys
from outbox.db.connection import Connection
from outbox.db.rows import QueueCounts
from outbox.job import sealing

__all__ = [
    "STATUS_SCHEMA_VERSION",
    "EncryptionCounts", "OutboxCounts", "QueueCounts", "Status", "WorkflowCounts",
    "encryption_counts", "pending_count", "queue_counts", "status"]

# The version of the shape ``status --json`` prints; a change to it bumps this.
STATUS_SCHEMA_VERSION = 1
_KNOWN_STATES = frozenset({"pending", "published", "failed"})
# What ``status --json`` prints per queue (``QueueCounts`` also keeps the oldest ready time).
_QUEUE_KEYS = ("ready", "delayed", "reserved", "dead")


@dataclass(frozen=True, slots=True)
class OutboxCounts:
    """Intents by state; the oldest pending one's age in seconds (None when none is).

    ``published`` counts the key rows of intents handed off and not yet pruned: it falls
    after ``outbox prune``.

    ``unknown_state`` counts rows whose state is none of the three (edited by hand or by
    a newer version): the relay never touches them, so they must at least be seen.
    """

    pending: int = 0
    published: int = 0
    failed: int = 0
    unknown_state: int = 0
    oldest_pending_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class HeldKey:
    """An ordering key a dead letter holds (``dead_letter_holds_key``): its later jobs
    wait until ``outbox queue retry`` or ``forget`` of ``message_id``. ``key`` is the
    start of the key's digest (the key itself is never stored)."""

    key: str
    message_id: str
    job_name: str
    queue: str


@dataclass(frozen=True, slots=True)
class OrderingCounts:
    """Jobs waiting for their ordering key's turn (counted in their queue's ``delayed``
    too), the keys they wait on, and the keys dead letters hold (at most ``HELD_LIMIT``)."""

    waiting: int = 0
    waiting_keys: int = 0
    held: tuple[HeldKey, ...] = ()


HELD_LIMIT = 100


@dataclass(frozen=True, slots=True)
class WorkflowCounts:
    """Workflows with a node not finished, and nodes waiting for a dependency: those
    are in no queue count until they are due (``outbox.workflows``)."""

    running: int = 0
    waiting_nodes: int = 0


PLAINTEXT = "plaintext"


@dataclass(frozen=True, slots=True)
class EncryptionCounts:
    """Whether this process encrypts (its keyring's ids, never a key), and the stored
    rows per key id in each table that holds payloads (``outbox.db.keys.status``; the
    key ``None`` counts plaintext rows). The rows are what the database holds whatever
    this process's keyring is: an operator sees what a key still protects, and which
    stored keys this process could not open."""

    sealing_key: str | None = None
    keyring: tuple[str, ...] = ()
    tables: dict[str, dict[str | None, int]] = field(default_factory=dict)

    @property
    def rows(self) -> dict[str | None, int]:
        """Rows per key id over every table."""
        out: dict[str | None, int] = {}
        for counts in self.tables.values():
            for key_id, n in counts.items():
                out[key_id] = out.get(key_id, 0) + n
        return out

    @property
    def not_in_keyring(self) -> list[str]:
        """Key ids of stored rows that this process's keyring does not have."""
        return sorted(k for k in self.rows if k is not None and k not in self.keyring)

    def as_dict(self) -> dict[str, Any]:
        return {
            "on": self.sealing_key is not None,
            "sealing_key": self.sealing_key,
            "keyring": list(self.keyring),
            "rows": {PLAINTEXT if k is None else k: n for k, n in sorted_rows(self.rows)},
            "not_in_keyring": self.not_in_keyring,
        }


def sorted_rows(rows: dict[str | None, int]) -> list[tuple[str | None, int]]:
    """Key ids in name order, plaintext last."""
    return sorted(rows.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))


def encryption_counts(conn: Connection) -> EncryptionCounts:
    """This process's keyring, and stored rows per key id (a scan of each table that
    holds payloads: an operator's question, like ``status`` itself)."""
    ring = sealing.active()
    if ring is None:
        return EncryptionCounts(None, (), keys.status(conn))
    return EncryptionCounts(ring.current, ring.ids, keys.status(conn))


@dataclass(frozen=True, slots=True)
class Status:
    """Counts by state, the oldest pending intent's age, and per-queue job counts."""

    outbox: OutboxCounts
    queues: dict[str, QueueCounts] = field(default_factory=dict)
    ordering: OrderingCounts = field(default_factory=OrderingCounts)
    workflows: WorkflowCounts = field(default_factory=WorkflowCounts)
    encryption: EncryptionCounts = field(default_factory=EncryptionCounts)

    @property
    def dead(self) -> int:
        """Dead letters in every queue."""
        return sum(q.dead for q in self.queues.values())

    def as_dict(self) -> dict[str, Any]:
        """The shape ``outbox status --json`` prints, version ``STATUS_SCHEMA_VERSION``.

        ``quarantined`` and ``dead_letters`` are the words the CLI uses; ``failed`` and
        ``dead`` are kept beside them, same values, for readers written before.
        ``paused`` (true/false) per queue was added within version 1: a key added is
        not a change of shape for readers that ignore keys they do not know. So was
        ``ordering`` (jobs waiting for their ordering key's turn, keys dead letters
        block), present only when a job waits or a key is blocked, and ``workflows``
        (workflows not finished, their nodes waiting for a dependency), present only
        when a workflow runs. So was ``encryption`` (always present): whether this
        process encrypts and with which key id, and stored rows per key id.
        """
        outbox = asdict(self.outbox)
        outbox["quarantined"] = self.outbox.failed
        queues = {
            name: {
                **{k: getattr(q, k) for k in _QUEUE_KEYS},
                "dead_letters": q.dead,
                "paused": q.paused,
            }
            for name, q in sorted(self.queues.items())
        }
        out = {"schema_version": STATUS_SCHEMA_VERSION, "outbox": outbox, "queues": queues}
        o = self.ordering
        if o.waiting or o.held:  # added within version 1, only when there is something
            out["ordering"] = {
                "waiting": o.waiting,
                "waiting_keys": o.waiting_keys,
                "held_keys": [asdict(h) for h in o.held],
            }
        if self.workflows.running:  # added within version 1, only when one runs
            out["workflows"] = asdict(self.workflows)
        out["encryption"] = self.encryption.as_dict()  # added within version 1
        return out


def status(conn: Connection) -> Status:
    """Read the outbox's and the queues' counts."""
    intents = conn.driver.outbox_counts()
    by_state = intents.by_state
    age = (
        None
        if intents.oldest_pending_ms is None
        else round(max(0, intents.now_ms - intents.oldest_pending_ms) / 1000, 3)
    )
    pending, failed = by_state.get("pending", 0), by_state.get("failed", 0)
    counts = OutboxCounts(
        pending=pending,
        # Every intent has a key row until pruned; those with no row left in the outbox
        # (or only a tombstone a version-1 relay left) were handed off.
        published=max(0, intents.keys - sum(n for s, n in by_state.items() if s != "published")),
        failed=failed,
        unknown_state=sum(n for s, n in by_state.items() if s not in _KNOWN_STATES),
        oldest_pending_age_s=age,
    )
    return Status(
        counts,
        {q.queue: q for q in queue_counts(conn)},
        ordering_counts(conn),
        WorkflowCounts(*conn.driver.workflow_counts()),
        encryption_counts(conn),
    )


def ordering_counts(conn: Connection) -> OrderingCounts:
    """Jobs waiting for their ordering key's turn, and the keys dead letters hold."""
    waiting, keys = conn.driver.ordering_counts()
    held = tuple(HeldKey(k[:12], m, j, q) for k, m, j, q in conn.driver.ordering_held(HELD_LIMIT))
    return OrderingCounts(waiting, keys, held)


def queue_counts(conn: Connection) -> list[QueueCounts]:
    """Counts per queue, sorted by name; dead from the dead letters."""
    return conn.driver.queue_counts()


def pending_count(conn: Connection) -> int:
    """How many intents are pending (sizes the CLI's progress bar)."""
    return conn.driver.outbox_pending_count()
