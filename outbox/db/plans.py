# ruff: noqa: E501  (HOT is a table: one statement a line, however long)
"""Query plans of the hot statements: each must reach its rows through its index.

A planner that starts scanning a whole table for a claim, an acknowledgement or a prune
turns a queue of a million rows into one that falls over, and nothing in a functional
test notices. So the hot statements are listed once, here, in ``HOT``: one row per
statement with the parameters it is planned with, the big table it works on and the
index it must use there. ``tests/integration/test_hot_plans.py`` checks every row on every
backend over 200,000 rows per table; ``python -m bench --only plans`` prints the same
table at 1,000,000. A new hot statement is one more row.

``explain()`` reads a plan in each dialect's own form (PostgreSQL's JSON tree, SQLite's
``EXPLAIN QUERY PLAN`` lines, MariaDB's ``EXPLAIN`` rows) into the same ``Access`` steps:
which table, read how (``index``: a lookup or range through an index; ``full index``: every
entry of an index, a covering read; ``full scan``: every row of the table), through which
index. Index names differ by dialect for the same key, so ``HOT`` names them by the
PostgreSQL name and ``index_name()`` translates.

``seed()`` fills the tables with one set-based ``INSERT … SELECT`` per table (named SQL in
``plans.sql``), then refreshes the planner's statistics. Its rows are shaped like a busy
system's: old handed-off key rows, a backlog of pending intents with some quarantined, a
queue of due, delayed and held jobs at mixed priorities (some leases expired, some
cancelled), a few dead letters and paused queues, and global limits in use: thousands of
limited keys with a window of starts, running slots and waiting jobs each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from outbox.db.connection import Connection

Kind = Literal["index", "full index", "full scan", "other"]
BIG_TABLES = ("outbox_keys", "outbox_messages", "outbox_jobs", "outbox_ordering_keys")
# The limits' tables (outbox.db.limits): seeded smaller than the big three (n starts, n/10
# slots and waits, n/100 keys) but never to be read whole either: every statement there
# runs inside an admission, for one key.
LIMIT_TABLES = ("outbox_limits", "outbox_limit_starts", "outbox_limit_slots", "outbox_limit_waits")
# The workflow tables (outbox.workflows), seeded with n workflows, n nodes (the first
# n/1,000 workflows' 1,000 each) and their fan-out edges: `outbox workflow show` and the acknowledgement of a node read one
# workflow's rows, or one node's, never the tables whole.
WORKFLOW_TABLES = ("outbox_workflows", "outbox_workflow_nodes", "outbox_workflow_edges")
# Tables of a handful of rows (an operator pauses a few queues): read by key or whole,
# whichever the planner likes; a statement on them only has to read them.
SMALL_TABLES = ("outbox_paused_queues",)
ALL = ("sqlite", "postgresql", "mysql")

# The worker every held seed job belongs to, and a few of its jobs (ids 1, 21, 41: every
# 20th job from the first is held, at attempt 1).
SEED_WORKER = "w:seed"
_HELD = [1, 21, 41]
_FENCE: dict[str, Any] = {
    "worker": SEED_WORKER,
    "ids": _HELD,
    "attempts": [1] * len(_HELD),
    "pairs": [(i, 1) for i in _HELD],
}
_CLAIM: dict[str, Any] = {"queue": "default", "limit": 100, "worker": "w:plan", "lease_ms": 30_000}
_HELD_ONE: dict[str, Any] = {"id": 1, "holder": SEED_WORKER, "attempts": 1}
# A limited key of the seed (k00000000 … k{n/100 - 1}), a slot (job 5 under key 5) and a
# ticket (job 10 under key 10). :now and :since lie before every seeded time, so a window
# reaches back over all of a key's starts: the widest read a key's statements make.
_LIMIT: dict[str, Any] = {"key": "k00000005", "now": 1_700_000_000_000}
_LSLOT: dict[str, Any] = {
    **_LIMIT,
    "job_id": 5,
    "attempts": 1,
    "holder": SEED_WORKER,
    "lease_ms": 30_000,
}
_LTICKET: dict[str, Any] = {"key": "k00000010", "job_id": 10}
_LWINDOW: dict[str, Any] = {**_LIMIT, "since": 1_699_999_940_000, "skip": 9}


@dataclass(frozen=True, slots=True)
class Access:
    """One read of a table in a plan."""

    table: str
    kind: Kind
    index: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class Hot:
    """A hot statement and the index it must use on ``table``.

    ``index`` is the PostgreSQL name (``index_name`` gives each dialect's), or several
    joined by ``|`` when either serves (a lookup by id through the primary key or through
    the partial index on id: the planner picks by the statistics); ``kinds`` the
    reads allowed through it (an ordered walk of an index that stops at a LIMIT reads as
    ``full index`` on SQLite). ``counted_in_full`` names the dialects whose planner counts
    ``table`` by reading it whole, as it should: a count of a backlog is as long as the
    backlog, and a table scan is cheaper than one index probe per row (SQLite's partial
    indexes do not cover the column their predicate names; PostgreSQL prices an
    index-only scan of most of a table above a sequential one). No other big table may
    be read in full there either. On a table of ``SMALL_TABLES`` any read passes (the
    planner reads 20 rows whole or by key as it likes); no big or limits table may be
    read in full by such a statement either.
    """

    statement: str
    params: Mapping[str, Any]
    table: str
    index: str
    dialects: tuple[str, ...] = ALL
    kinds: tuple[Kind, ...] = ("index",)
    what: str = ""
    counted_in_full: tuple[str, ...] = ()


def _h(
    statement: str,
    params: Mapping[str, Any],
    table: str,
    index: str,
    what: str,
    dialects: tuple[str, ...] = ALL,
    kinds: tuple[Kind, ...] = ("index",),
    counted_in_full: tuple[str, ...] = (),
) -> Hot:
    return Hot(statement, params, table, index, dialects, kinds, what, counted_in_full)


_KEY = {"key_digest": "0" * 58 + "100005"}
_IDS = {"ids": list(range(101, 201))}  # intents that exist at any seed size
_PG, _LITE, _MY = ("postgresql",), ("sqlite",), ("mysql",)
_NOT_PG = ("sqlite", "mysql")
_WALK: tuple[Kind, ...] = ("index", "full index")
_PAUSED = "outbox_paused_queues_pkey"
_WF = {"workflow_id": "w" + "0" * 34 + "5"}  # the fifth seeded workflow: 1,000 nodes
_NODE = {"node_id": "m" + "0" * 31 + "4001"}  # its first node, parent of the other 999

# fmt: off
HOT: tuple[Hot, ...] = (
    _h("relay_handoff", {"batch_size": 500, "notify": True}, "outbox_messages", "outbox_messages_pending", "relay claim, relay move (one statement)", _PG),
    _h("relay_claim", {"batch_size": 500}, "outbox_messages", "outbox_messages_pending", "relay claim", _NOT_PG, _WALK),
    _h("relay_claim_rows", {"batch_size": 500}, "outbox_messages", "outbox_messages_pending", "relay claim (Python verify)", kinds=_WALK),
    _h("relay_claim_checked", {"batch_size": 500}, "outbox_messages", "outbox_messages_pending", "relay claim (broker target)", kinds=_WALK),
    _h("relay_insert_jobs", _IDS, "outbox_messages", "outbox_messages_pending|outbox_messages_pkey", "relay move: insert"),
    _h("relay_insert_jobs_ordered", {**_IDS, "waiting": [101, 102]}, "outbox_messages", "outbox_messages_pending|outbox_messages_pkey", "relay move: insert, some waiting their key's turn"),
    _h("relay_ordering_earlier", {**_IDS, "keys": ["0" * 64, "1" * 64], "max_id": 200}, "outbox_messages", "outbox_messages_ordering", "relay: a key's older intent outside the batch"),
    _h("relay_delete_moved", _IDS, "outbox_messages", "outbox_messages_pending|outbox_messages_pkey", "relay move: delete"),
    _h("relay_mark_failed", {**_IDS, "reason": "invalid_json"}, "outbox_messages", "outbox_messages_pending|outbox_messages_pkey", "relay quarantine"),
    _h("job_claim", _CLAIM, "outbox_jobs", "outbox_jobs_claim", "worker claim", ("sqlite", "postgresql")),
    _h("job_claim_pick", _CLAIM, "outbox_jobs", "outbox_jobs_claim", "worker claim: pick", _MY),
    _h("job_claim_mark", {**_CLAIM, "ids": _HELD, "now_ms": 0}, "outbox_jobs", "outbox_jobs_pkey", "worker claim: mark", _MY),
    _h("job_ack_claim", {**_FENCE, **_CLAIM}, "outbox_jobs", "outbox_jobs_claim", "ack+claim", _PG),
    _h("job_ack_claim", {**_FENCE, **_CLAIM}, "outbox_jobs", "outbox_jobs_pkey", "ack+claim: ack", _PG),
    _h("job_ack", _FENCE, "outbox_jobs", "outbox_jobs_pkey", "ack"),
    _h("job_heartbeat", {**_FENCE, "lease_ms": 30_000}, "outbox_jobs", "outbox_jobs_pkey", "heartbeat"),
    _h("job_release", {"id": 1, "holder": SEED_WORKER, "attempts": 1, "delay_ms": 1000, "error": "E"}, "outbox_jobs", "outbox_jobs_pkey", "release"),
    _h("job_release_unspent", {**_FENCE, "delay_ms": 0, "error": None}, "outbox_jobs", "outbox_jobs_pkey", "release unspent"),
    _h("job_dead_take", {"id": 1, "holder": SEED_WORKER, "attempts": 1}, "outbox_jobs", "outbox_jobs_pkey", "dead-letter"),
    _h("job_reap_scan", {"limit": 100}, "outbox_jobs", "outbox_jobs_lease", "reap scan"),
    _h("job_reap_release", {"id": 1, "holder": SEED_WORKER, "attempts": 1, "error": "LeaseExpired"}, "outbox_jobs", "outbox_jobs_pkey", "reap: requeue"),
    _h("prune_keys", {"age_ms": 0, "batch": 1000}, "outbox_keys", "outbox_keys_created", "prune keys"),
    _h("prune_keys", {"age_ms": 0, "batch": 1000}, "outbox_messages", "outbox_messages_message_id_key", "prune keys: handed off?"),
    _h("prune_tombstones", {"age_ms": 0, "batch": 1000}, "outbox_messages", "outbox_messages_not_pending", "prune tombstones"),
    _h("status_pending_count", {}, "outbox_messages", "outbox_messages_pending", "status: pending", kinds=_WALK, counted_in_full=_LITE),
    _h("status_oldest_pending", {}, "outbox_messages", "outbox_messages_pending", "status: oldest pending", counted_in_full=_LITE),
    _h("status_state_counts", {}, "outbox_messages", "outbox_messages_not_pending", "status: intents by state", kinds=_WALK, counted_in_full=_LITE),
    _h("status_key_count", {}, "outbox_keys", "outbox_keys_created", "status: key rows", kinds=_WALK),
    _h("queue_counts", {}, "outbox_jobs", "outbox_jobs_claim", "status: queue counts", kinds=_WALK, counted_in_full=("sqlite", "postgresql")),
    _h("failed_list", {"limit": 50}, "outbox_messages", "outbox_messages_failed", "outbox failed", kinds=_WALK),
    _h("record_lookup", _KEY, "outbox_keys", "outbox_keys_pkey", "record: key lookup"),
    # queue control (outbox.queue.control): the claim's pause check, cancel, snooze, pause.
    # MariaDB reads the pause check at plan time as a const table (a lookup by the whole
    # primary key, the only way it makes a table const): its EXPLAIN says "no matching
    # row in const table" without naming it, so there is no row to check there. INSERTs
    # are planned on PostgreSQL only (their ON CONFLICT arbiter index); SQLite and
    # MariaDB do not plan an INSERT … VALUES.
    _h("job_claim", _CLAIM, "outbox_paused_queues", _PAUSED, "worker claim: pause check", ("sqlite", "postgresql")),
    _h("job_ack_claim", {**_FENCE, **_CLAIM}, "outbox_paused_queues", _PAUSED, "ack+claim: pause check", _PG),
    _h("job_cancel_requested", _FENCE, "outbox_jobs", "outbox_jobs_pkey", "heartbeat: cancel flags"),
    _h("job_snooze", {**_HELD_ONE, "delay_ms": 1000, "max_snoozes": 100}, "outbox_jobs", "outbox_jobs_pkey", "snooze"),
    _h("job_held_state", _HELD_ONE, "outbox_jobs", "outbox_jobs_pkey", "snooze/cancel: why unchanged"),
    _h("job_cancel_take", {"message_id": "m" + "0" * 33 + "42"}, "outbox_jobs", "outbox_jobs_message_id_key", "cancel: waiting job"),
    _h("job_cancel_flag", {"message_id": "m" + "0" * 33 + "41"}, "outbox_jobs", "outbox_jobs_message_id_key", "cancel: held job"),
    _h("queue_pause", {"queue": "default"}, "outbox_paused_queues", _PAUSED, "pause", _PG),
    _h("queue_resume", {"queue": "paused-01"}, "outbox_paused_queues", _PAUSED, "resume"),
    _h("queue_paused_list", {}, "outbox_paused_queues", _PAUSED, "paused queues", kinds=_WALK),
    # global limits (outbox.db.limits): each reaches one key's rows, or one job's
    _h("limit_lock", _LIMIT, "outbox_limits", "outbox_limits_pkey", "limit: lock key"),
    _h("limit_key_add", _LIMIT, "outbox_limits", "outbox_limits_pkey", "limit: add key", _PG),
    _h("limit_slot_clear_expired", _LIMIT, "outbox_limit_slots", "outbox_limit_slots_pkey", "limit slot: clear expired"),
    _h("limit_slot_count", _LIMIT, "outbox_limit_slots", "outbox_limit_slots_pkey", "limit slot: count"),
    _h("limit_slot_take", _LSLOT, "outbox_limit_slots", "outbox_limit_slots_pkey", "limit slot: take", _PG),
    _h("limit_slot_free", _LSLOT, "outbox_limit_slots", "outbox_limit_slots_pkey", "limit slot: free"),
    _h("limit_slot_renew", _LSLOT, "outbox_limit_slots", "outbox_limit_slots_pkey", "limit slot: renew"),
    _h("limit_start_prune", _LWINDOW, "outbox_limit_starts", "outbox_limit_starts_key", "limit start: prune"),
    _h("limit_start_count", _LWINDOW, "outbox_limit_starts", "outbox_limit_starts_key", "limit start: count", kinds=_WALK),
    _h("limit_start_nth_oldest", _LWINDOW, "outbox_limit_starts", "outbox_limit_starts_key", "limit start: nth oldest", kinds=_WALK),
    _h("limit_start_nth_latest", _LWINDOW, "outbox_limit_starts", "outbox_limit_starts_key", "limit start: nth latest", kinds=_WALK),
    _h("limit_start_ticket", _LTICKET, "outbox_limit_starts", "outbox_limit_starts_job", "limit start: ticket"),
    _h("limit_start_drop_ticket", _LTICKET, "outbox_limit_starts", "outbox_limit_starts_job", "limit start: drop ticket"),
    _h("limit_wait_first", _LIMIT, "outbox_limit_waits", "outbox_limit_waits_pkey", "limit wait: first", kinds=_WALK),
    _h("limit_wait_drop", {**_LIMIT, "job_id": 20_005}, "outbox_limit_waits", "outbox_limit_waits_pkey|outbox_limit_waits_job", "limit wait: drop"),
    _h("limit_wait_drop_job", {"job_id": 20_005}, "outbox_limit_waits", "outbox_limit_waits_job|outbox_limit_waits_pkey", "limit wait: drop job"),
    _h("limit_wake", {**_LIMIT, "job_id": 3}, "outbox_jobs", "outbox_jobs_pkey", "limit wake"),
    _h("limit_job_wait", {**_HELD_ONE, "until": 1_700_000_060_000}, "outbox_jobs", "outbox_jobs_pkey", "limit: job waits"),
    _h("limit_job_return", _HELD_ONE, "outbox_jobs", "outbox_jobs_pkey", "limit: job returned"),
    # ordering keys (outbox.db.ordering): the reaper's heal reads a page of key rows
    _h("ordering_ack_leave", {"ids": list(range(101, 201)), "attempts": [1] * 100, "worker": "w", "keys": ["0" * 58 + "100005"]}, "outbox_ordering_keys", "outbox_ordering_keys_pkey", "ack of keyed jobs: delete, promote, drop", _PG),
    _h("ordering_ack_claim", {**_FENCE, **_CLAIM, "keys": ["0" * 58 + "100005"]}, "outbox_ordering_keys", "outbox_ordering_keys_pkey", "ack+claim of keyed jobs: drop", _PG),
    _h("ordering_ack_claim", {**_FENCE, **_CLAIM, "keys": ["0" * 58 + "100005"]}, "outbox_jobs", "outbox_jobs_claim", "ack+claim of keyed jobs: claim", _PG),
    _h("ordering_stranded", {"after": "0" * 58 + "100005", "until": "g", "limit": 100}, "outbox_ordering_keys", "outbox_ordering_keys_pkey", "reap: ordering heal (a page of keys)", kinds=_WALK),
    # workflows (outbox.workflows): `outbox workflow show` reads one workflow's rows and
    # what the queue says of each node; a node's acknowledgement reaches its children
    _h("workflow_get", _WF, "outbox_workflows", "outbox_workflows_pkey", "workflow show: the workflow"),
    _h("workflow_nodes_show", _WF, "outbox_workflow_nodes", "outbox_workflow_nodes_name", "workflow show: its nodes"),
    _h("workflow_nodes_show", _WF, "outbox_jobs", "outbox_jobs_message_id_key", "workflow show: its nodes' jobs"),
    _h("workflow_edges_show", _WF, "outbox_workflow_edges", "outbox_workflow_edges_workflow", "workflow show: its edges"),
    _h("workflow_node_get", _NODE, "outbox_workflow_nodes", "outbox_workflow_nodes_pkey", "workflow ack: the node"),
    _h("workflow_children_count_down", _NODE, "outbox_workflow_edges", "outbox_workflow_edges_pkey", "workflow ack: count its children down"),
)
# fmt: on

# The same key under each dialect's name, where it differs from PostgreSQL's.
_NAMES: dict[str, dict[str, str]] = {
    "sqlite": {
        "outbox_jobs_pkey": "INTEGER PRIMARY KEY",
        "outbox_messages_pkey": "INTEGER PRIMARY KEY",
        "outbox_keys_pkey": "sqlite_autoindex_outbox_keys_1",
        "outbox_messages_message_id_key": "sqlite_autoindex_outbox_messages_1",
        "outbox_jobs_message_id_key": "sqlite_autoindex_outbox_jobs_1",
        "outbox_paused_queues_pkey": "sqlite_autoindex_outbox_paused_queues_1",
        "outbox_limits_pkey": "sqlite_autoindex_outbox_limits_1",
        "outbox_limit_slots_pkey": "sqlite_autoindex_outbox_limit_slots_1",
        "outbox_limit_waits_pkey": "sqlite_autoindex_outbox_limit_waits_1",
        "outbox_ordering_keys_pkey": "sqlite_autoindex_outbox_ordering_keys_1",
        "outbox_workflows_pkey": "sqlite_autoindex_outbox_workflows_1",
        "outbox_workflow_nodes_pkey": "sqlite_autoindex_outbox_workflow_nodes_1",
        "outbox_workflow_edges_pkey": "sqlite_autoindex_outbox_workflow_edges_1",
    },
    "mysql": {
        "outbox_jobs_pkey": "PRIMARY",
        "outbox_messages_pkey": "PRIMARY",
        "outbox_keys_pkey": "PRIMARY",
        "outbox_messages_message_id_key": "message_id",
        "outbox_messages_pending": "outbox_messages_state_id",
        "outbox_messages_failed": "outbox_messages_state_id",
        "outbox_messages_not_pending": "outbox_messages_state_id",
        "outbox_jobs_message_id_key": "message_id",
        "outbox_paused_queues_pkey": "PRIMARY",
        "outbox_limits_pkey": "PRIMARY",
        "outbox_limit_slots_pkey": "PRIMARY",
        "outbox_limit_waits_pkey": "PRIMARY",
        "outbox_ordering_keys_pkey": "PRIMARY",
        "outbox_workflows_pkey": "PRIMARY",
        "outbox_workflow_nodes_pkey": "PRIMARY",
        "outbox_workflow_edges_pkey": "PRIMARY",
    },
}


def index_name(dialect: str, index: str) -> str:
    """``index`` (a PostgreSQL name) as ``dialect`` names the same key."""
    return _NAMES.get(dialect, {}).get(index, index)


def seed(conn: Connection, n: int) -> None:
    """2n key rows, n intents, n jobs and n/100 dead letters; 20 paused queues; n/100
    limited keys with n starts, n/10 slots and n/10 waiting jobs; n ordering key rows;
    n workflows, the first n/1,000 with 1,000 nodes each and their edges: one INSERT each; then fresh
    statistics. The tables must be empty (ids start at 1)."""
    for name in (
        "plan_seed_keys",
        "plan_seed_messages",
        "plan_seed_jobs",
        "plan_seed_dead",
        "plan_seed_paused",
        "plan_seed_limits",
        "plan_seed_limit_starts",
        "plan_seed_limit_slots",
        "plan_seed_limit_waits",
        "plan_seed_ordering_keys",
        "plan_seed_workflows",
        "plan_seed_workflow_nodes",
        "plan_seed_workflow_edges",
    ):
        conn.execute(name, {"n": n})
    conn.execute("plan_analyze")


def explain(conn: Connection, statement: str, params: Mapping[str, Any]) -> list[Access]:
    """How the database would run the named ``statement`` with ``params`` (not run)."""
    sql = conn.statement(statement).driver
    found = _READERS[conn.dialect.name](conn, sql, conn.adapt(params))
    aliases = _aliases(sql)
    return [
        Access(aliases.get(a.table, a.table), a.kind, a.index, a.detail)
        for a in found
        if a is not None
    ]


_ALIAS = re.compile(r"\b(outbox_\w+)\s+(?:AS\s+)?([a-z]\w*)\b", re.IGNORECASE)
_KEYWORDS = {"where", "set", "using", "values", "on", "order", "group", "limit", "for", "join"}


def _aliases(sql: str) -> dict[str, str]:
    """Alias → table as written in ``sql`` (SQLite and MariaDB report the alias)."""
    return {
        alias: table
        for table, alias in _ALIAS.findall(sql)
        if alias.lower() not in _KEYWORDS and not alias.lower().startswith("outbox_")
    }


def check(accesses: list[Access], hot: Hot, dialect: str) -> str | None:
    """Why the plan breaks ``hot``'s rule, or None: the expected index is used on its
    table with an allowed kind, and no big or limits table is read in full."""
    full = [
        a
        for a in accesses
        if a.table in BIG_TABLES + LIMIT_TABLES + WORKFLOW_TABLES
        and a.kind == "full scan"
        and not (dialect in hot.counted_in_full and a.table == hot.table)
    ]
    if full:
        return f"full scan of {', '.join(sorted({a.table for a in full}))}"
    if dialect in hot.counted_in_full or hot.table in SMALL_TABLES:
        return None if any(a.table == hot.table for a in accesses) else f"{hot.table} not read"
    wanted = {index_name(dialect, i) for i in hot.index.split("|")}
    if not any(a.table == hot.table and a.index in wanted and a.kind in hot.kinds for a in accesses):
        return f"{hot.table} not read through {' or '.join(sorted(wanted))} ({'/'.join(hot.kinds)})"
    return None


# -- the three plan forms ------------------------------------------------------------


def _pg_plan(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[Access | None]:
    (row,) = conn.execute_sql(f"EXPLAIN (FORMAT JSON) {sql}", params)
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(_pg_accesses(plan[0]["Plan"]))


def _sqlite_plan(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[Access | None]:
    return [_sqlite_access(str(r[-1])) for r in conn.execute_sql(f"EXPLAIN QUERY PLAN {sql}", params)]


def _mysql_plan(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[Access | None]:
    return [_mysql_access(r) for r in conn.execute_sql(f"EXPLAIN {sql}", params)]


def _pg_accesses(node: dict[str, Any]) -> list[Access]:
    out: list[Access] = []
    kind_of: dict[str, Kind] = {
        "Seq Scan": "full scan",
        "Index Scan": "index",
        "Index Only Scan": "index",
        "Bitmap Heap Scan": "index",
        "Tid Scan": "index",
        "ModifyTable": "other",
    }
    relation = of_ring_slot(node.get("Relation Name"))
    node_type = str(node["Node Type"])
    arbiters = node.get("Conflict Arbiter Indexes") or []
    if relation and arbiters:
        # INSERT … ON CONFLICT probes its arbiter index for each row it inserts.
        out.append(Access(relation, "index", str(arbiters[0]), "ON CONFLICT arbiter"))
    elif relation and node_type in kind_of:
        index = of_ring_slot(node.get("Index Name"))
        if node_type == "Bitmap Heap Scan":
            index = _bitmap_index(node)
        elif node_type == "Tid Scan":
            index = "ctid"
        out.append(Access(relation, kind_of[node_type], index, node_type))
    for child in node.get("Plans", []):
        out.extend(_pg_accesses(child))
    return out


_RING_SLOT = re.compile(r"_ring_[0-9]+$")


def of_ring_slot(name: Any) -> Any:
    """A slot of the ring storage read as the table or index it is a part of
    (``outbox_jobs_ring_0`` is ``outbox_jobs``, ``outbox_jobs_claim_ring_0``
    ``outbox_jobs_claim``: storage/ring.sql names them so)."""
    return _RING_SLOT.sub("", name) if isinstance(name, str) else name


def _bitmap_index(node: dict[str, Any]) -> str | None:
    for child in node.get("Plans", []):
        if child.get("Index Name"):
            return str(of_ring_slot(child["Index Name"]))
        found = _bitmap_index(child)
        if found:
            return found
    return None


_SQLITE = re.compile(
    r"^(SCAN|SEARCH) (\w+)(?: AS \w+)?"
    r"(?: USING (?:(COVERING) )?INDEX (\w+)| USING (INTEGER PRIMARY KEY))?"
)


def _sqlite_access(detail: str) -> Access | None:
    m = _SQLITE.match(detail)
    if m is None:
        return None
    verb, table, covering, index, rowid = m.groups()
    index = index or rowid
    kind: Kind
    if verb == "SEARCH":
        kind = "index"
    elif index is not None and (covering or rowid is None):
        kind = "full index"
    else:
        kind = "full scan"
    return Access(table, kind, index, detail)


def _mysql_access(row: tuple[Any, ...]) -> Access | None:
    table, access, key = row[2], row[3], row[5]
    if not table or str(table).startswith("<"):
        return None
    kind: Kind
    if access == "ALL":
        kind = "full scan"
    elif access == "index":
        kind = "full index"
    else:
        kind = "index"
    detail = f"type={access} key={key} rows={row[8]} {row[9] or ''}".strip()
    return Access(str(table), kind, None if key is None else str(key), detail)


# Each dialect's plan, by dialect name: the form differs, the steps read from it do not.
_READERS: dict[str, Callable[[Connection, str, Mapping[str, Any]], list[Access | None]]] = {
    "postgresql": _pg_plan,
    "sqlite": _sqlite_plan,
    "mysql": _mysql_plan,
}
