"""The tables, defined once and rendered per dialect.

This is the schema at the latest version, as SQLAlchemy ``MetaData`` (for Alembic users
and for the test that compares it with what the migrations build). The migrations
themselves are the frozen SQL files in ``<dialect>/migrations/``.

Every time column is BIGINT milliseconds since the UNIX epoch, written from the
database's own clock (except ``outbox_messages.available_at``, which keeps the
producer's value as given so the fingerprint can be recomputed from the row). One
integer type compares, indexes and round-trips identically in all three databases.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Identity,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    text,
)

from outbox.job import BLOCKED_OFFSET_MS

metadata = MetaData()

# SQLite only makes INTEGER PRIMARY KEY an alias of the rowid; it is 64-bit there anyway.
_Id = BigInteger().with_variant(Integer(), "sqlite")


def _id() -> Column[int]:
    """BIGINT identity (PostgreSQL), AUTO_INCREMENT (MariaDB), rowid alias (SQLite)."""
    return Column("id", _Id, Identity(), primary_key=True, autoincrement=True)


# Binary collation on MariaDB: names and ids compare byte for byte, as in the other two
# databases ("Search" is not the queue "search"). AUTOINCREMENT on SQLite: an id is never
# reused, which every fenced update (id, reserved_by, attempts) relies on.
_OPTIONS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
    "sqlite_autoincrement": True,
}


def _name(column: str, nullable: bool = False) -> Column[str]:
    return Column(column, String(200), nullable=nullable)


keys = Table(
    "outbox_keys",
    metadata,
    Column("key_digest", String(64), primary_key=True),
    Column("message_id", String(36), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
# Prune walks key rows by age.
Index("outbox_keys_created", keys.c.created_at)

# Intents not yet handed off: pending, or quarantined (failed). A handed-off intent
# leaves this table; its key row stays in outbox_keys. ``keyed`` is 1 when the writer
# wrote the key row itself (version 2); version-1 writers leave it NULL during a rolling
# upgrade and a trigger (migration 2) completes their insert, until the contract step
# drops it. A key's uniqueness is outbox_keys' primary key. ``published`` rows are
# tombstones a version-1 relay or that trigger left; prune removes them.
messages = Table(
    "outbox_messages",
    metadata,
    _id(),
    Column("message_id", String(36), nullable=False, unique=True),
    Column("key_digest", String(64), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    _name("job_name"),
    _name("queue"),
    Column("payload", Text, nullable=True),
    Column("max_attempts", Integer, nullable=True),
    Column("available_at", BigInteger, nullable=True),
    Column("state", String(16), nullable=False, server_default="pending"),
    Column("created_at", BigInteger, nullable=False),
    Column("published_at", BigInteger, nullable=True),
    Column("failed_at", BigInteger, nullable=True),
    Column("failure_reason", String(64), nullable=True),
    Column("keyed", SmallInteger, nullable=True),
    # 0 (most urgent, the default) to 9; part of the fingerprint when not 0.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    # W3C Trace Context of the recording span: "<traceparent>[ <tracestate>]" (outbox.tracing).
    Column("trace_context", String(600), nullable=True),

    # SHA-256 (hex) of the ordering key, NULL without one; part of the fingerprint when set.
    Column("ordering_key", String(64), nullable=True),
    **_OPTIONS,
)

# The relay scans pending rows oldest first, `outbox failed` lists quarantined ones.
# Partial indexes where the dialect has them; MariaDB gets the composite equivalent.
Index(
    "outbox_messages_pending",
    messages.c.id,
    postgresql_where=text("state = 'pending'"),
    sqlite_where=text("state = 'pending'"),
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]
Index(
    "outbox_messages_failed",
    messages.c.id,
    postgresql_where=text("state = 'failed'"),
    sqlite_where=text("state = 'failed'"),
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]
# Rows that are not pending (quarantined, tombstones) for status counts and prune; the
# pending backlog never enters it. MariaDB reads them from outbox_messages_state_id.
Index(
    "outbox_messages_not_pending",
    messages.c.state,
    messages.c.published_at,
    postgresql_where=text("state <> 'pending'"),
    sqlite_where=text("state <> 'pending'"),
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]
Index("outbox_messages_state_id", messages.c.state, messages.c.id).ddl_if(dialect="mysql")
jobs = Table(
    "outbox_jobs",
    metadata,
    _id(),
    Column("message_id", String(36), nullable=False, unique=True),
    _name("queue"),
    _name("job_name"),
    Column("payload", Text, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=True),
    Column("available_at", BigInteger, nullable=False),
    Column("reserved_at", BigInteger, nullable=True),
    Column("reserved_by", String(200), nullable=True),
    Column("lease_expires_at", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("last_error", String(200), nullable=True),
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    # Set by `outbox queue cancel` on a held job; its worker records the cancellation.
    Column("cancel_requested_at", BigInteger, nullable=True),
    # Times the job came back through outbox.Snooze (capped: outbox.queue.control).
    Column("snoozes", Integer, nullable=False, server_default=text("0")),
    # Copied from the intent at handoff (outbox.tracing); the attempt span's parent.
    Column("trace_context", String(600), nullable=True),

    # The ordering key's digest (outbox.queue.ordering): NULL for a job without one.
    Column("ordering_key", String(64), nullable=True),
    **_OPTIONS,
)

# The claim walks due, unheld jobs of one queue in (priority, available_at, id) order
# and stops after the batch: a range scan whose cost does not grow with delayed or held rows.
# PostgreSQL and SQLite keep only unheld rows in it (partial index); MariaDB, which has
# no partial indexes, skips the few held rows in the range.
Index(
    "outbox_jobs_claim",
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.available_at,
    jobs.c.id,
    postgresql_where=text("reserved_by IS NULL"),
    sqlite_where=text("reserved_by IS NULL"),
)
# The reaper looks for expired leases; only held rows have one.
Index(
    "outbox_jobs_lease",
    jobs.c.lease_expires_at,
    postgresql_where=text("reserved_by IS NOT NULL"),
    sqlite_where=text("reserved_by IS NOT NULL"),
)

failed_jobs = Table(
    "outbox_failed_jobs",
    metadata,
    _id(),
    Column("message_id", String(36), nullable=False, unique=True),
    _name("queue"),
    _name("job_name"),
    Column("payload", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=True),
    Column("exception_class", String(200), nullable=False),
    Column("exception_message", Text, nullable=True),
    Column("exception_trace", Text, nullable=True),
    Column("failed_at", BigInteger, nullable=False),
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    # Kept so `queue retry` puts the job back in its key's line.
    Column("ordering_key", String(64), nullable=True),
    # 1: this dead letter keeps its ordering key blocked (dead_letter_holds_key).
    Column("ordering_held", SmallInteger, nullable=False, server_default=text("0")),
    **_OPTIONS,
)

Index("outbox_failed_jobs_queue", failed_jobs.c.queue, failed_jobs.c.id)

# Per-minute job completions for the dashboard's chart (the throughput migration): each worker adds
# its in-memory counts to its own rows every few seconds (outbox.queue.throughput), so
# no two workers write one row; `outbox prune` drops minutes older than a day.
throughput = Table(
    "outbox_throughput",
    metadata,
    Column("minute_at", BigInteger, primary_key=True, autoincrement=False),
    Column("queue", String(200), primary_key=True),
    Column("worker_id", String(200), primary_key=True),
    Column("succeeded", Integer, nullable=False, server_default=text("0")),
    Column("retried", Integer, nullable=False, server_default=text("0")),
    Column("dead", Integer, nullable=False, server_default=text("0")),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)

# A queue listed here is paused: no worker claims from it (`outbox queue pause`).
paused_queues = Table(
    "outbox_paused_queues",
    metadata,
    Column("queue", String(200), primary_key=True),
    Column("paused_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)

schema_version = Table(
    "outbox_schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", String(200), nullable=False),
    Column("applied_at", BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

# Global concurrency and rate limits (``outbox.queue.gate``). One row per limited key
# (a digest of job name, limit and key value, or of a queue): the row an admission
# locks, so admissions of one key serialise while other keys run in parallel.
limits = Table(
    "outbox_limits",
    metadata,
    Column("limit_key", String(64), primary_key=True),
    Column("created_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)

# A concurrency slot: held by one attempt of one job until it settles or its lease
# (``expires_at``, renewed by heartbeats) runs out. Counted per key.
limit_slots = Table(
    "outbox_limit_slots",
    metadata,
    Column("limit_key", String(64), primary_key=True),
    Column("job_id", BigInteger, primary_key=True, autoincrement=False),
    Column("attempts", Integer, nullable=False),
    Column("holder", String(200), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)

# Each start of a rate-limited job, by the database's clock: the sliding window counts
# these. A start in the future is a reservation: ``job_id`` waits in the queue until
# then and starts on it. Starts older than the window are deleted by the next admission
# of their key.
limit_starts = Table(
    "outbox_limit_starts",
    metadata,
    _id(),
    Column("limit_key", String(64), nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("job_id", BigInteger, nullable=True),
    **_OPTIONS,
)
Index("outbox_limit_starts_key", limit_starts.c.limit_key, limit_starts.c.started_at)
Index("outbox_limit_starts_job", limit_starts.c.job_id)

# Jobs waiting for a concurrency slot of a key: the settling of a slot makes the first
# of them due at once instead of at its fallback time.
limit_waits = Table(
    "outbox_limit_waits",
    metadata,
    Column("limit_key", String(64), primary_key=True),
    Column("job_id", BigInteger, primary_key=True, autoincrement=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index("outbox_limit_waits_job", limit_waits.c.job_id)

# The outcome of a job whose handler keeps its result (``keep_result=``, outbox.results):
# written by the acknowledgement (or the dead-lettering) in the same transaction, read
# by ``outbox.results.get`` and ``outbox result``; ``outbox prune`` drops the rows whose
# retention (``expires_at``) has passed. Never the exception's message: class and trace.
job_results = Table(
    "outbox_job_results",
    metadata,
    Column("message_id", String(36), primary_key=True),
    _name("queue"),
    _name("job_name"),
    Column("status", String(16), nullable=False),
    Column("payload", Text, nullable=False),
    Column("return_value", Text, nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("started_at", BigInteger, nullable=True),
    Column("finished_at", BigInteger, nullable=False),
    Column("worker_id", String(200), nullable=True),
    Column("exception_class", String(200), nullable=True),
    Column("exception_trace", Text, nullable=True),
    Column("expires_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index("outbox_job_results_expires", job_results.c.expires_at)

# The broker inbox (``outbox.queue.broker.inbox``): the message id of each JetStream job
# whose transactional handler committed, written in that transaction; a redelivery of
# an id here is acknowledged without running. ``outbox prune`` deletes old ids.
inbox = Table(
    "outbox_inbox",
    metadata,
    Column("message_id", String(200), primary_key=True),
    _name("queue"),
    Column("handled_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index("outbox_inbox_handled", inbox.c.handled_at)

# Workflows (``outbox.workflows``): a graph of jobs recorded in one transaction under one
# idempotency key (its ``outbox_keys`` row names the workflow id and the graph's
# fingerprint). Every node is a row here from the start; a node whose dependencies are
# not all done is ``waiting`` and is no job at all, so the claim never sees it. The roots
# go out as ordinary intents; a node's acknowledgement makes its dependents due, in
# that transaction (``outbox.db.workflows``). ``outbox prune`` drops finished workflows.
workflows = Table(
    "outbox_workflows",
    metadata,
    Column("workflow_id", String(36), primary_key=True),
    _name("name"),
    Column("state", String(16), nullable=False),
    Column("node_count", Integer, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index("outbox_workflows_created", workflows.c.created_at)

# One row per node: its job as recorded, how many dependencies it still waits for and
# its state (waiting, due, succeeded, dead, skipped). Timings of a run are read from the
# queue, the results and the dead letters; the row keeps when it became due and ended.
workflow_nodes = Table(
    "outbox_workflow_nodes",
    metadata,
    Column("node_id", String(36), primary_key=True),
    Column("workflow_id", String(36), nullable=False),
    _name("name"),
    _name("job_name"),
    _name("queue"),
    Column("payload", Text, nullable=False),
    Column("max_attempts", Integer, nullable=True),
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("on_failure", String(8), nullable=False),
    Column("deps_left", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("due_at", BigInteger, nullable=True),
    Column("finished_at", BigInteger, nullable=True),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index(
    "outbox_workflow_nodes_name",
    workflow_nodes.c.workflow_id,
    workflow_nodes.c.name,
    unique=True,
)

# The edges: ``child_id`` runs after ``parent_id``. The acknowledgement of a parent
# walks its children by the primary key; ``ctx.results`` walks a child's parents.
workflow_edges = Table(
    "outbox_workflow_edges",
    metadata,
    Column("parent_id", String(36), primary_key=True),
    Column("child_id", String(36), primary_key=True),
    Column("workflow_id", String(36), nullable=False),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
Index("outbox_workflow_edges_child", workflow_edges.c.child_id)
Index("outbox_workflow_edges_workflow", workflow_edges.c.workflow_id)

# Ordering keys (outbox.queue.ordering): one row per key with unfinished jobs, the row
# that entering the line and leaving it lock, so the two serialise. The jobs of a key
# are found through the partial indexes below, which hold keyed rows only: a job or an
# intent without a key adds nothing to them (MariaDB, without partial indexes, keeps
# NULL entries).
ordering_keys = Table(
    "outbox_ordering_keys",
    metadata,
    Column("key_digest", String(64), primary_key=True),
    **{k: v for k, v in _OPTIONS.items() if k != "sqlite_autoincrement"},
)
# A key's waiting jobs in line order (the next to get its turn), and its job in its turn
# (not waiting: see outbox.job.BLOCKED_OFFSET_MS): the two split a key's rows, so a
# keyed row's write (a promotion, a claim) enters one of them, not both (migration 15).
# MariaDB keeps every keyed row in (ordering_key, id) and reads the range of
# (ordering_key, available_at) for the one in its turn.
_WAITING = f"ordering_key IS NOT NULL AND available_at >= {BLOCKED_OFFSET_MS}"
_LIVE = f"ordering_key IS NOT NULL AND available_at < {BLOCKED_OFFSET_MS}"
Index(
    "outbox_jobs_ordering_waiting",
    jobs.c.ordering_key,
    jobs.c.id,
    postgresql_where=text(_WAITING),
    sqlite_where=text(_WAITING),
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]
Index("outbox_jobs_ordering", jobs.c.ordering_key, jobs.c.id).ddl_if(dialect="mysql")
Index(
    "outbox_jobs_ordering_live",
    jobs.c.ordering_key,
    postgresql_where=text(_LIVE),
    sqlite_where=text(_LIVE),
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]
Index("outbox_jobs_ordering_at", jobs.c.ordering_key, jobs.c.available_at).ddl_if(
    dialect="mysql"
)
Index(
    "outbox_messages_ordering",
    messages.c.ordering_key,
    messages.c.id,
    postgresql_where=text("ordering_key IS NOT NULL"),
    sqlite_where=text("ordering_key IS NOT NULL"),
)
# Dead letters that keep their ordering key blocked, found by key (outbox.db.ordering).
Index(
    "outbox_failed_jobs_held",
    failed_jobs.c.ordering_key,
    postgresql_where=text("ordering_held = 1"),
    sqlite_where=text("ordering_held = 1"),
)
