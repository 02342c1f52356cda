"""Workflows: a small graph of jobs recorded in one transaction, run in dependency order.

``Workflow("order:42:fulfil")`` names the graph; ``wf.add(Job(...), after=[...])`` adds
a node and returns its handle; ``record(conn, key, wf)`` writes every node in the
caller's transaction under one idempotency key and returns the workflow id. Why each
rule is where it is:

- Everything is checked before anything is sent (``InvalidWorkflow``, a ``ValueError``,
  naming the node): no cycle, dependencies within the workflow, at most ``MAX_NODES``
  nodes, each node a valid ``Job`` and a unique name. A bad graph writes nothing.
- The key's ``outbox_keys`` row names the workflow id with the graph's fingerprint
  (``graph_fingerprint``, over every node's name, job, dependencies and ``on_failure``,
  sorted by name): the same graph under the same key returns the same id, another is an
  ``IdempotencyConflict``, exactly as ``record()`` does for one job.
- Every node is a row of ``outbox_workflow_nodes`` from the start; the roots also become
  ordinary intents, so the relay hands them off as any other. The other nodes are no job
  until their last dependency succeeds: the worker's acknowledgement of that dependency
  inserts them, in its own transaction (``outbox.db.workflows``). No sweep polls.
- A node's id is a message id of its own kind (``outbox.ids.new_node_id``): the worker
  tells nodes apart by the id alone, so jobs outside workflows pay nothing.
- A node keeps its result (at least ``outbox.results.DEFAULT_KEEP_S``), so its
  dependents read it as ``ctx.results[name]``.

On NATS JetStream a workflow cannot keep these guarantees (the ack is not a database
transaction): a relay with a ``nats://`` target refuses to hand off a workflow's node
(``outbox.relay.jetstream``), in one line.

``get(db, workflow_id)`` reads a workflow's nodes and their states; ``cancel`` cancels
every node that has not finished; ``prune`` drops finished workflows for ``outbox
prune``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from outbox.db import workflows as steps
from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import Plan, run, run_async
from outbox.db.connection import Connection, Database
from outbox.db.dialect import Dialect
from outbox.db.driver import Row
from outbox.db.migrate import applied_versions, version_of
from outbox.errors import IdempotencyConflict, InvalidJob, RetryTransaction
from outbox.ids import is_message_id, new_message_id, new_node_id
from outbox.job import (
    NAME_PATTERN,
    Job,
    availability_ms,
    check_name,
    fingerprint,
    key_digest,
    normalise,
)
from outbox.log import get_logger
from outbox.queue.control import cancel_plan

MAX_NODES = 1_000
ON_FAILURE = ("stop", "run")
FINGERPRINT_VERSION = "wf1"
# What `outbox workflow show` and `get` call a node's state.
WAITING, DUE, RUNNING, SUCCEEDED, DEAD, SKIPPED = (
    "waiting", "due", "running", "succeeded", "dead", "skipped",
)
PRUNE_BATCH = 1_000

__all__ = [
    "MAX_NODES",
    "InvalidWorkflow",
    "Node",
    "NodeState",
    "Workflow",
    "WorkflowState",
    "cancel",
    "get",
]

log = get_logger("outbox.workflows")


class InvalidWorkflow(InvalidJob):
    """The workflow cannot be recorded as built: a cycle, a dependency outside it, too
    many nodes, or a node that is not a valid job. Nothing was written."""


@dataclass(frozen=True, slots=True)
class Node:
    """A node's handle, returned by ``Workflow.add``: pass it in another node's
    ``after=``. ``name`` is how dependents find its result (``ctx.results[name]``)."""

    workflow: str
    name: str


@dataclass(slots=True)
class _Spec:
    name: str
    job: Job
    after: tuple[str, ...]
    on_failure: str


class Workflow:
    """A graph of jobs, built in memory and written by ``record(conn, key, workflow)``."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name, "workflow name")
        self._nodes: dict[str, _Spec] = {}
        self._token = new_message_id()  # tells this workflow's handles from another's

    def add(
        self,
        job: Job,
        *,
        after: Iterable[Node | str] = (),
        name: str | None = None,
        on_failure: str = "stop",
    ) -> Node:
        """Add ``job`` as a node that runs once every node of ``after`` has succeeded.

        ``name`` defaults to the job's name (then ``<job name>:2``, ``:3``… for the
        next nodes of that name). ``on_failure="run"`` runs the node even when a
        dependency ends in the dead letters (a clean-up node); the default, ``"stop"``,
        sends it to the dead letters as ``DependencyFailed`` without running it.
        """
        index = len(self._nodes)
        if index >= MAX_NODES:
            raise InvalidWorkflow(f"workflow {self.name!r}: at most {MAX_NODES:,} nodes")
        if not isinstance(job, Job):
            raise InvalidWorkflow(
                f"workflow {self.name!r}, node {index}: expected an outbox.Job "
                f"(got {type(job).__name__})"
            )
        node_name = self._name_for(job, name, index)
        if on_failure not in ON_FAILURE:
            raise InvalidWorkflow(
                f"workflow {self.name!r}, node {node_name!r}: on_failure must be "
                f"'stop' or 'run' (got {on_failure!r})"
            )
        deps = tuple(self._dependency(node_name, d) for d in after)
        self._nodes[node_name] = _Spec(node_name, job, tuple(dict.fromkeys(deps)), on_failure)
        return Node(self._token, node_name)

    def _name_for(self, job: Job, name: str | None, index: int) -> str:
        if name is None:
            base = job.name if isinstance(job.name, str) else str(index)
            name, n = base, 1
            while name in self._nodes:
                n += 1
                name = f"{base}:{n}"
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise InvalidWorkflow(
                f"workflow {self.name!r}, node {index}: a node name must be 1-200 "
                "characters of A-Z a-z 0-9 _ . : -"
            )
        if name in self._nodes:
            raise InvalidWorkflow(f"workflow {self.name!r}: two nodes are named {name!r}")
        return name

    def _dependency(self, node: str, dep: Node | str) -> str:
        if isinstance(dep, Node):
            if dep.workflow != self._token:
                raise InvalidWorkflow(
                    f"workflow {self.name!r}, node {node!r}: dependency {dep.name!r} "
                    "belongs to another workflow"
                )
            return dep.name
        if isinstance(dep, str):
            return dep  # a node added later may be named; checked by ``plan``
        raise InvalidWorkflow(
            f"workflow {self.name!r}, node {node!r}: after= takes nodes returned by "
            f"add() or node names (got {type(dep).__name__})"
        )

    def __len__(self) -> int:
        return len(self._nodes)

    def record_into(self, conn: Any, key: str, *, available_at: Any = 0) -> str:
        """What ``record(conn, key, workflow)`` runs (``record_workflow``)."""
        return record_workflow(conn, key, self, available_at=available_at)

    async def record_into_async(self, conn: Any, key: str, *, available_at: Any = 0) -> str:
        """What ``record_async(conn, key, workflow)`` runs."""
        return await record_workflow_async(conn, key, self, available_at=available_at)

    @property
    def nodes(self) -> list[str]:
        """The node names, in the order they were added."""
        return list(self._nodes)

    def dependencies(self, name: str) -> tuple[str, ...]:
        """The names of the nodes ``name`` runs after."""
        return self._nodes[name].after

    def specs(self) -> list[_Spec]:
        """Every node, checked (``InvalidWorkflow`` otherwise), in dependency order."""
        if not self._nodes:
            raise InvalidWorkflow(f"workflow {self.name!r} has no nodes")
        for spec in self._nodes.values():
            for dep in spec.after:
                if dep not in self._nodes:
                    raise InvalidWorkflow(
                        f"workflow {self.name!r}, node {spec.name!r}: dependency {dep!r} "
                        "is not a node of this workflow"
                    )
                if dep == spec.name:
                    raise InvalidWorkflow(
                        f"workflow {self.name!r}, node {spec.name!r} depends on itself"
                    )
        return _ordered(self.name, self._nodes)


def _ordered(workflow: str, nodes: dict[str, _Spec]) -> list[_Spec]:
    """Kahn's order (roots first, then by insertion); a cycle names one of its nodes."""
    left = {name: len(spec.after) for name, spec in nodes.items()}
    children: dict[str, list[str]] = {name: [] for name in nodes}
    for spec in nodes.values():
        for dep in spec.after:
            children[dep].append(spec.name)
    ready = [name for name, n in left.items() if n == 0]
    out: list[_Spec] = []
    while ready:
        name = ready.pop(0)
        out.append(nodes[name])
        for child in children[name]:
            left[child] -= 1
            if left[child] == 0:
                ready.append(child)
    if len(out) < len(nodes):
        stuck = sorted(n for n, k in left.items() if k > 0)
        raise InvalidWorkflow(
            f"workflow {workflow!r} has a cycle through node {stuck[0]!r}"
            f" ({len(stuck)} nodes are on or after a cycle)"
        )
    return out


@dataclass(frozen=True, slots=True)
class _Planned:
    workflow_id: str
    key_digest: str
    fingerprint: str
    rows: list[list[Any]]
    edges: list[list[str]]
    available_at: int | None


def graph_fingerprint(name: str, specs: Sequence[_Spec], at_ms: int | None) -> str:
    """SHA-256 (hex) over the workflow's name, its availability and each node (sorted by
    name): name, ``on_failure``, the job's own fingerprint, its dependencies sorted."""
    parts = [FINGERPRINT_VERSION, name, "" if at_ms is None else str(at_ms)]
    for spec in sorted(specs, key=lambda s: s.name):
        parts += [spec.name, spec.on_failure, fingerprint(normalise(spec.job), None),
                  ",".join(sorted(spec.after))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def plan(key: str, wf: Workflow, available_at: Any = 0) -> _Planned:
    """Validate ``wf`` and build every row to write (no database)."""
    if not isinstance(wf, Workflow):
        raise InvalidWorkflow(f"expected an outbox.Workflow (got {type(wf).__name__})")
    digest = key_digest(key)
    at_ms = availability_ms(available_at)
    specs = wf.specs()
    ids = {spec.name: new_node_id() for spec in specs}
    rows: list[list[Any]] = []
    for spec in specs:
        try:
            normal = normalise(spec.job)
        except InvalidJob as exc:
            raise InvalidWorkflow(f"workflow {wf.name!r}, node {spec.name!r}: {exc}") from None
        node_id = ids[spec.name]
        # A root's intent: a key digest of its own (never an application's: keys cannot
        # hold a line feed), so `outbox retry` of a quarantined root touches no key row.
        intent_key = hashlib.sha256(f"{key}\n{spec.name}".encode()).hexdigest()
        rows.append([
            node_id, spec.name, normal.name, normal.queue, normal.payload_json,
            normal.max_attempts, normal.priority, spec.on_failure, len(spec.after),
            intent_key, fingerprint(normal, at_ms),
        ])
    edges = [[ids[dep], ids[spec.name]] for spec in specs for dep in spec.after]
    return _Planned(
        new_message_id(), digest, graph_fingerprint(wf.name, specs, at_ms), rows, edges, at_ms
    )


def _write(p: _Planned, name: str) -> Plan[str]:
    """The key row; if it is ours, the workflow, its nodes, edges and root intents."""
    key = {"key_digest": p.key_digest, "message_id": p.workflow_id, "fingerprint": p.fingerprint}
    yield ("workflow_key_insert", key)
    found = yield ("record_lookup", {"key_digest": p.key_digest})
    if not found:
        raise RetryTransaction(
            "record: the workflow's key was taken by a concurrent transaction this snapshot "
            "cannot see; roll the transaction back and run all of it again"
        )
    holder, held_fp = str(found[0][0]), str(found[0][1])
    if holder != p.workflow_id:
        if held_fp == p.fingerprint:
            return holder
        raise IdempotencyConflict(holder)
    yield ("workflow_insert", {**key, "workflow_id": p.workflow_id, "name": name,
                               "node_count": len(p.rows)})
    batch = {"workflow_id": p.workflow_id, "rows": orjson.dumps(p.rows).decode()}
    yield ("workflow_nodes_insert", batch)
    if p.edges:
        edges = {"workflow_id": p.workflow_id, "edges": orjson.dumps(p.edges).decode()}
        yield ("workflow_edges_insert", edges)
    yield ("workflow_roots_insert", {**batch, "available_at": p.available_at})
    return p.workflow_id


def record_workflow(conn: Any, key: str, wf: Workflow, *, available_at: Any = 0) -> str:
    """``record(conn, key, workflow)``: every node in ``conn``'s transaction; the id."""
    planned = plan(key, wf, available_at)
    target = adapt(conn)
    return run(_write(planned, wf.name), target, "record")


async def record_workflow_async(
    conn: Any, key: str, wf: Workflow, *, available_at: Any = 0
) -> str:
    """``record_async(conn, key, workflow)``."""
    planned = plan(key, wf, available_at)
    target = await adapt_async(conn)
    return await run_async(_write(planned, wf.name), target, "record")


# -- reading back ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as ``get`` reads it. Times are aware UTC datetimes by the database's
    clock; ``attempts`` counts the runs started; ``error`` is the class of the exception
    that dead-lettered it (never its message)."""

    node_id: str
    name: str
    job_name: str
    queue: str
    state: str
    attempts: int
    after: list[str]
    on_failure: str
    created_at: datetime | None
    due_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowState:
    """A workflow and its nodes (in the order they were recorded)."""

    workflow_id: str
    name: str
    state: str  # running, succeeded, failed (some node dead or skipped), cancelled
    created_at: datetime | None
    nodes: list[NodeState] = field(default_factory=list)

    def node(self, name: str) -> NodeState:
        """The node called ``name`` (KeyError if none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def _at(ms: Any) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


def _node(r: Row, after: list[str]) -> NodeState:
    (node_id, name, job_name, queue, state, on_failure, _total, _left, created, due,
     finished, held_by, held_at, job_attempts, result_attempts, result_started,
     dead_attempts, dead_class) = r
    attempts = next((int(a) for a in (job_attempts, result_attempts, dead_attempts)
                     if a is not None), 0)
    shown = RUNNING if state == DUE and held_by is not None else str(state)
    started = held_at if held_by is not None else result_started
    return NodeState(
        str(node_id), str(name), str(job_name), str(queue), shown, attempts, after,
        str(on_failure), _at(created), _at(due), _at(started), _at(finished),
        None if dead_class is None else str(dead_class),
    )


def read(conn: Connection, workflow_id: str) -> WorkflowState | None:
    """``get`` on one of our connections (one read transaction, a consistent view)."""

    head, rows, edges = conn.transact(
        lambda c: steps.on(c, steps.show_plan(workflow_id)), operation="workflow show"
    )
    if not head:
        return None
    names = {str(r[0]): str(r[1]) for r in rows}
    after: dict[str, list[str]] = {}
    for parent, child in edges:
        after.setdefault(str(child), []).append(names.get(str(parent), str(parent)))
    nodes = [_node(r, sorted(after.get(str(r[0]), []))) for r in rows]
    wf_id, name, state, _count, created = head[0]
    return WorkflowState(str(wf_id), str(name), _overall(str(state), nodes), _at(created), nodes)


def _overall(stored: str, nodes: list[NodeState]) -> str:
    if stored == "cancelled":
        return "cancelled"
    if any(n.state in (WAITING, DUE, RUNNING) for n in nodes):
        return "running"
    if all(n.state == SUCCEEDED for n in nodes):
        return "succeeded"
    return "failed"


def _database(db: Database | Connection | str) -> tuple[Database | None, Connection | None]:
    if isinstance(db, Connection):
        return None, db
    return (Database(db) if isinstance(db, str) else db), None


def _check_id(workflow_id: object) -> str:
    if not isinstance(workflow_id, str) or not is_message_id(workflow_id):
        raise ValueError("a workflow id is a UUID (as record() returned it)")
    return workflow_id


def get(db: Database | Connection | str, workflow_id: str) -> WorkflowState | None:
    """The workflow ``workflow_id`` and its nodes' states (``db``: a ``Database``, one of
    its connections, or a URL); None when there is none (never recorded, or pruned)."""
    workflow_id = _check_id(workflow_id)
    database, conn = _database(db)
    if conn is not None:
        return read(conn, workflow_id)
    assert database is not None
    with database.connect() as c:
        return read(c, workflow_id)


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """One line of the dashboard's list: no node detail, no payloads."""

    workflow_id: str
    name: str
    state: str  # running (some node not finished), finished, or cancelled
    node_count: int
    finished: int
    created_at: datetime | None


def recent(conn: Connection, limit: int = 100) -> list[WorkflowSummary]:
    """The newest ``limit`` workflows, newest first."""
    rows = conn.read(lambda c: steps.on(c, steps.list_plan(limit)), operation="workflows")
    out = []
    for wf_id, name, stored, count, created, finished in rows:
        state = "cancelled" if stored == "cancelled" else (
            "finished" if int(finished) == int(count) else "running")
        out.append(WorkflowSummary(str(wf_id), str(name), state, int(count), int(finished),
                                   _at(created)))
    return out


def _cancel(workflow_id: str, dialect: Dialect) -> Plan[int | None]:
    """Every node not finished: waiting ones skipped (a ``cancelled`` dead letter each),
    due ones cancelled as ``outbox queue cancel`` cancels a job (a held one when its
    worker returns), a root still an intent taken out of the outbox."""
    key = {"workflow_id": workflow_id}
    found = yield ("workflow_get", key)
    if not found:
        return None
    yield ("workflow_cancel_mark", key)
    yield ("workflow_cancel_waiting_dead", key)
    yield ("workflow_cancel_waiting", key)
    due = yield ("workflow_due_nodes", key)
    for (node_id,) in due:
        node = {"node_id": str(node_id)}
        yield ("workflow_cancel_intent", node)
        if (yield from _intent_gone(node)):
            continue
        yield from cancel_plan(str(node_id), dialect)
    return len(due)


def _intent_gone(node: dict[str, str]) -> Plan[bool]:
    """After the delete of a due node's intent: no queue row means it was still an
    intent (now gone): its dead letter, skipped. A queue row means it was handed off; it
    is cancelled as a job (``outbox.queue.control.cancel_plan``, the one place)."""
    rows = yield ("result_job_state", {"message_id": node["node_id"]})
    if rows:
        return False
    yield ("workflow_cancel_intent_dead", node)
    yield ("workflow_node_skip", node)
    return True


def cancel(db: Database | Connection | str, workflow_id: str) -> int | None:
    """Cancel every node of ``workflow_id`` that has not finished; the number of nodes
    that were due (queued or running) then; None when there is no such workflow."""
    workflow_id = _check_id(workflow_id)
    database, conn = _database(db)
    if conn is None:
        assert database is not None
        with database.connect() as c:
            return _cancel_on(c, workflow_id)
    return _cancel_on(conn, workflow_id)


def _cancel_on(conn: Connection, workflow_id: str) -> int | None:
    """A fresh plan for each try (``transact`` runs it again after a deadlock)."""
    dialect = conn.dialect
    found: int | None = conn.transact(
        lambda c: steps.on(c, _cancel(workflow_id, dialect)), operation="cancel"
    )
    return found


def prune(conn: Connection, age_ms: int, *, batch: int = PRUNE_BATCH) -> int:
    """Delete at most ``batch`` finished workflows (no node waiting or due) recorded more
    than ``age_ms`` ago, with their nodes and edges; how many went."""

    if version_of("workflows") not in applied_versions(conn):
        return 0  # held back with the contract step: no workflow exists yet
    deleted: int = conn.transact(
        lambda c: steps.on(c, steps.prune_plan(age_ms, batch)), operation="prune"
    )
    if deleted:
        log.info("prune.workflows", deleted=deleted)
    return deleted
