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

from outbox.workflows.graph import (
    MAX_NODES,
    InvalidWorkflow,
    Node,
    Workflow,
    graph_fingerprint,
    record_workflow,
    record_workflow_async,
)
from outbox.workflows.state import (
    DEAD,
    DUE,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    WAITING,
    NodeState,
    WorkflowState,
    WorkflowSummary,
    cancel,
    get,
    prune,
    recent,
    why_not_retried,
)

__all__ = [
    "DEAD",
    "DUE",
    "MAX_NODES",
    "RUNNING",
    "SKIPPED",
    "SUCCEEDED",
    "WAITING",
    "InvalidWorkflow",
    "Node",
    "NodeState",
    "Workflow",
    "WorkflowState",
    "WorkflowSummary",
    "cancel",
    "get",
    "graph_fingerprint",
    "prune",
    "recent",
    "record_workflow",
    "record_workflow_async",
    "why_not_retried",
]
