"""The graph and its recording: ``Workflow``, its checks, its fingerprint, and the plan
that writes it in the caller's transaction (the package docstring says why)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import Plan, run, run_async
from outbox.db.workflows import RUN, STOP
from outbox.errors import IdempotencyConflict, InvalidJob, RetryTransaction
from outbox.ids import new_message_id, new_node_id
from outbox.job import (
    NAME_PATTERN,
    Job,
    availability_ms,
    check_name,
    fingerprint,
    key_digest,
    normalise,
)

MAX_NODES = 1_000
ON_FAILURE = (STOP, RUN)
FINGERPRINT_VERSION = "wf1"


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
        if normal.ordering_key is not None:  # the graph orders its nodes; a key would not
            raise InvalidWorkflow(
                f"workflow {wf.name!r}, node {spec.name!r}: a workflow's node cannot have "
                "an ordering_key (its dependencies order it)"
            )
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
