"""Reading a workflow back, cancelling it, pruning it (``get``, ``recent``, ``cancel``,
``prune``): each a plan of ``outbox.db.workflows`` run on one of our connections."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outbox.db import workflows as steps
from outbox.db.caller import Plan, drive
from outbox.db.connection import Connection
from outbox.db.dialect import Dialect
from outbox.db.driver import Row
from outbox.db.rows import own_due_ms
from outbox.ids import is_message_id, is_node_id
from outbox.log import get_logger
from outbox.queue.control import Target, call, cancel_plan

# What `outbox workflow show` and `get` call a node's state.
WAITING, DUE, RUNNING, SUCCEEDED, DEAD, SKIPPED = (
    "waiting", "due", "running", "succeeded", "dead", "skipped",
)
PRUNE_BATCH = 1_000

log = get_logger("outbox.workflows")


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as ``get`` reads it. Times are aware UTC datetimes by the database's
    clock; ``attempts`` counts the runs started. ``error`` is the class of the exception
    that dead-lettered it, or, while its job is in the queue, of its last failed attempt
    (never a message); ``due_at`` is then the job's own due time: a retry's, after its
    backoff, as ``outbox queue jobs`` shows it."""

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
    (node_id, name, job_name, queue, state, on_failure, created, due,
     finished, held_by, held_at, job_attempts, result_attempts, result_started,
     dead_attempts, dead_class, job_due, job_error) = r
    attempts = next((int(a) for a in (job_attempts, result_attempts, dead_attempts)
                     if a is not None), 0)
    shown = RUNNING if state == DUE and held_by is not None else str(state)
    started = held_at if held_by is not None else result_started
    if job_due is not None:  # in the queue: its own due time (a retry's backoff) and error
        due, error = own_due_ms(int(job_due)), job_error
    else:
        error = dead_class
    return NodeState(
        str(node_id), str(name), str(job_name), str(queue), shown, attempts, after,
        str(on_failure), _at(created), _at(due), _at(started), _at(finished),
        None if error is None else str(error),
    )


def _shaped(shown: tuple[list[Row], list[Row], list[Row]]) -> WorkflowState | None:
    head, rows, edges = shown
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


def _check_id(workflow_id: object) -> str:
    if not isinstance(workflow_id, str) or not is_message_id(workflow_id):
        raise ValueError("a workflow id is a UUID (as record() returned it)")
    return workflow_id


def get(db: Target, workflow_id: str) -> WorkflowState | None:
    """The workflow ``workflow_id`` and its nodes' states (``db``: a ``Database``, one of
    its connections, a URL, or an application's connection); None when there is none
    (never recorded, or pruned). One transaction, so one consistent view."""
    workflow_id = _check_id(workflow_id)
    return _shaped(call(db, lambda _: steps.show_plan(workflow_id), "workflow show"))


def why_not_retried(db: Target, message_id: str) -> str | None:
    """Why ``queue retry`` requeued nothing for ``message_id``, when it is a skipped
    workflow node (its dead letter stays: it comes back with the failed node it waits
    for): one line naming the node and the failed node(s) to retry. None otherwise."""
    if not is_node_id(message_id):
        return None
    found = call(db, lambda _: steps.skip_cause_plan(message_id), "queue retry")
    if found is None:
        return None
    name, causes = found
    if not causes:
        return (f"{message_id} is workflow node {name!r}, skipped when its workflow was "
                "cancelled: it has no failed node to retry")
    which = ", ".join(f"{n!r} (outbox queue retry {i})" for n, i in causes)
    return (f"{message_id} is workflow node {name!r}, skipped because a dependency "
            f"failed; it runs again when that node is retried: {which}")


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
    rows = conn.read(lambda c: drive(steps.list_plan(limit), c), operation="workflows")
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


def cancel(db: Target, workflow_id: str) -> int | None:
    """Cancel every node of ``workflow_id`` that has not finished; the number of nodes
    that were due (queued or running) then; None when there is no such workflow. On an
    application's connection it happens in the caller's transaction."""
    workflow_id = _check_id(workflow_id)
    found: int | None = call(db, lambda d: _cancel(workflow_id, d), "cancel")
    return found


def prune(conn: Connection, age_ms: int, *, batch: int = PRUNE_BATCH) -> int:
    """Delete at most ``batch`` finished workflows (no node waiting or due) recorded more
    than ``age_ms`` ago, with their nodes and edges; how many went."""
    deleted: int = conn.transact(
        lambda c: drive(steps.prune_plan(age_ms, batch), c), operation="prune"
    )
    if deleted:
        log.info("prune.workflows", deleted=deleted)
    return deleted
