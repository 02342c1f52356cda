"""A workflow node's transitions, as plans that run inside the transaction that settles it.

Each transition is a plan (``outbox.db.caller``: a generator of named statements), so the
one copy serves our own connections (the worker's acknowledgement and dead-lettering, the
reaper, ``queue retry``) and the caller's (``outbox workflow cancel`` through
``outbox.queue.control``, ``outbox.testing``'s ``run_pending``)::

    waiting --(last dependency done)--> due --(ack)--> succeeded
       |                                  |
       |                                  +--(dead letter)--> dead --(queue retry)--> due
       +--(a dependency failed, on_failure="stop")--> skipped --(ancestor retried)--> waiting

A node is due while its job is an intent or a queue row; "running" is a due node whose
queue row a worker holds (read, not stored). Only a node that reaches 0 dependencies
becomes a job, by an INSERT in its last parent's acknowledgement: the claim statement never
sees a waiting node, and jobs outside workflows never reach this module (the worker tells
a node by its id, ``outbox.ids.is_node_id``).

Two parents acknowledged at once serialise on the children's row locks taken by
``workflow_children_count_down`` (or ``workflow_children``, locked): exactly one sees a
child reach 0, and the queue's unique ``message_id`` would refuse a second insert anyway.
"""

from __future__ import annotations

from typing import Any

from outbox.db.caller import Plan, drive
from outbox.db.driver import Executor, Row

STOP = "stop"
RUN = "run"


def _release(node_id: str) -> Plan[None]:
    """The children of a finished node wait for one dependency fewer; those waiting for
    none become jobs, due now."""
    key = {"node_id": node_id}
    yield ("workflow_children_count_down", key)
    yield ("workflow_children_enqueue", key)
    yield ("workflow_children_mark_due", key)


def succeeded(node_id: str) -> Plan[None]:
    """The node's job was acknowledged (in this transaction). Once only: a node not due
    (already succeeded) releases nothing again."""
    node = yield ("workflow_node_get", {"node_id": node_id})
    if not node or node[0][3] != "due":
        return
    yield ("workflow_node_succeeded", {"node_id": node_id})
    if int(node[0][6]):  # a leaf has no children to release
        yield from _release(node_id)


def failed(node_id: str) -> Plan[None]:
    """The node's job moved to the dead letters (in this transaction): its dependents
    that stop on failure are skipped (a ``DependencyFailed`` dead letter each, never run),
    recursively; those with ``on_failure="run"`` count it as done. Once only, as
    ``succeeded``."""
    node = yield ("workflow_node_get", {"node_id": node_id})
    if not node or node[0][3] != "due":
        return
    yield ("workflow_node_dead", {"node_id": node_id})
    todo = [node_id]
    while todo:
        parent = todo.pop()
        key = {"node_id": parent}
        children = yield ("workflow_children", key)
        if not children:
            continue
        skipped = [str(c[0]) for c in children if c[1] == "waiting" and c[2] == STOP]
        if skipped:
            yield ("workflow_children_skip_dead", key)
            yield ("workflow_children_skip", key)
        yield from _release(parent)
        todo.extend(skipped)


def requeued(node_id: str) -> Plan[None]:
    """``queue retry`` put the node's dead letter back in the queue (in this transaction):
    the node is due again, and the branch its failure skipped waits again: each skipped
    descendant waits for its unfinished parents, and a waiting node that runs on failure
    waits again for the parent that now runs again."""
    yield ("workflow_node_requeued", {"node_id": node_id})
    todo = [node_id]
    while todo:
        parent = todo.pop()
        children = yield ("workflow_children", {"node_id": parent})
        for child_id, state, on_failure in children:
            child = {"node_id": str(child_id)}
            if state == "skipped":
                left = yield ("workflow_parents_unfinished", child)
                yield ("workflow_node_rearm", {**child, "deps_left": int(left[0][0])})
                yield ("workflow_dead_delete", child)
                todo.append(str(child_id))
            elif state == "waiting" and on_failure == RUN:
                yield ("workflow_node_count_up", child)


def skipped_of(c: Executor, node_ids: list[str]) -> list[str]:
    """Those of ``node_ids`` that are skipped nodes (``queue retry`` leaves their dead
    letters: they come back when the failed node they wait for is retried)."""
    out = []
    for node_id in node_ids:
        rows = c.execute("workflow_node_get", {"node_id": node_id})
        if rows and rows[0][3] == "skipped":
            out.append(node_id)
    return out


def parents_plan(node_id: str) -> Plan[list[tuple[str, str, str, str | None]]]:
    """``ctx.results``' rows: each parent's name, id, state and kept return value (JSON)."""
    rows = yield ("workflow_parent_results", {"node_id": node_id})
    return [(str(n), str(i), str(s), None if v is None else str(v)) for n, i, s, v in rows]


def skip_cause_plan(node_id: str) -> Plan[tuple[str, list[tuple[str, str]]] | None]:
    """For a skipped node: its name and the dead nodes (name, id) its skip comes from,
    found up through its skipped ancestors (none: its workflow was cancelled); None when
    the node is not skipped. ``queue retry`` of a skipped node says which to retry."""
    node = yield ("workflow_node_get", {"node_id": node_id})
    if not node or node[0][3] != "skipped":
        return None
    causes: dict[str, str] = {}
    seen, todo = {node_id}, [node_id]
    while todo:
        for name, parent, state, _ in (yield from parents_plan(todo.pop())):
            if parent in seen:
                continue
            seen.add(parent)
            if state == "dead":
                causes[parent] = name
            elif state == "skipped":
                todo.append(parent)
    return str(node[0][2]), sorted((name, i) for i, name in causes.items())


def parent_results(database: Any, node_id: str) -> list[tuple[str, str, str, str | None]]:
    """``parents_plan`` on a connection of ``database`` (a ``Database``) of its own."""
    with database.connect() as conn:
        rows: list[tuple[str, str, str, str | None]] = conn.read(
            lambda c: drive(parents_plan(node_id), c), operation="workflow results"
        )
    return rows


def show_plan(workflow_id: str) -> Plan[tuple[list[Row], list[Row], list[Row]]]:
    """``outbox.workflows.get``'s reads: the workflow, its nodes, its edges."""
    key = {"workflow_id": workflow_id}
    head = yield ("workflow_get", key)
    nodes = yield ("workflow_nodes_show", key)
    edges = yield ("workflow_edges_show", key)
    return head, nodes, edges


def prune_plan(age_ms: int, batch: int) -> Plan[int]:
    """At most ``batch`` finished workflows recorded ``age_ms`` ago or more, with their
    nodes and edges; how many went."""
    now = yield ("now_ms", {})
    picked = yield ("workflow_prune_pick", {"before_ms": int(now[0][0]) - age_ms, "batch": batch})
    for (workflow_id,) in picked:
        key = {"workflow_id": str(workflow_id)}
        yield ("workflow_delete_edges", key)
        yield ("workflow_delete_nodes", key)
        yield ("workflow_delete", key)
    return len(picked)


def list_plan(limit: int) -> Plan[list[Row]]:
    """The newest workflows: id, name, stored state, node count, created, nodes finished."""
    return (yield ("workflow_list", {"limit": limit}))
