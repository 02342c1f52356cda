-- Workflows (outbox.workflows, outbox.db.workflows): the statements every dialect writes
-- alike. A node's dependents are reached through outbox_workflow_edges' primary key
-- (parent_id, child_id); each node is found by its own primary key.

-- name: workflow_insert
-- The workflow's own row, in the recording transaction.
INSERT INTO outbox_workflows
    (workflow_id, name, state, node_count, created_at)
VALUES (:workflow_id, :name, 'running', :node_count, {now_ms});

-- name: workflow_node_succeeded
-- The acknowledgement of a node, in its transaction: succeeded (only from due, so an
-- acknowledgement can never finish a node twice).
UPDATE outbox_workflow_nodes SET state = 'succeeded', finished_at = {now_ms}
WHERE node_id = :node_id AND state = 'due';

-- name: workflow_node_dead
-- The move of a node to the dead letters, in its transaction.
UPDATE outbox_workflow_nodes SET state = 'dead', finished_at = {now_ms}
WHERE node_id = :node_id AND state = 'due';

-- name: workflow_children_count_down
-- One dependency fewer for every waiting child of :node_id. This UPDATE also takes the
-- children's row locks for the rest of the transaction: two parents acknowledged at
-- once serialise here, so exactly one of them sees a child reach 0.
UPDATE outbox_workflow_nodes SET deps_left = deps_left - 1
WHERE node_id IN (SELECT e.child_id FROM outbox_workflow_edges e WHERE e.parent_id = :node_id)
  AND state = 'waiting';

-- name: workflow_children_mark_due
-- ... and are marked due (after workflow_children_enqueue, in the same transaction).
UPDATE outbox_workflow_nodes SET state = 'due', due_at = {now_ms}
WHERE node_id IN (SELECT e.child_id FROM outbox_workflow_edges e WHERE e.parent_id = :node_id)
  AND state = 'waiting' AND deps_left = 0;

-- name: workflow_children_skip_dead
-- A failed (dead or skipped) node's children that do not run on failure: a dead letter
-- each, class DependencyFailed, attempts 0 (they never ran).
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at)
SELECT n.node_id, n.queue, n.job_name, n.payload, 0, n.max_attempts, 'DependencyFailed',
       'a workflow dependency of this node failed; the node did not run', '', n.priority,
       {now_ms}
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
WHERE e.parent_id = :node_id AND n.state = 'waiting' AND n.on_failure = 'stop';

-- name: workflow_children_skip
-- ... and are marked skipped.
UPDATE outbox_workflow_nodes SET state = 'skipped', finished_at = {now_ms}
WHERE node_id IN (SELECT e.child_id FROM outbox_workflow_edges e WHERE e.parent_id = :node_id)
  AND state = 'waiting' AND on_failure = 'stop';

-- name: workflow_node_get
-- One node's own row, by its id, and whether any node depends on it (a leaf's
-- acknowledgement then has no children to release).
SELECT node_id, workflow_id, name, state, on_failure, deps_left,
  CASE WHEN EXISTS (SELECT 1 FROM outbox_workflow_edges e WHERE e.parent_id = :node_id)
    THEN 1 ELSE 0 END
FROM outbox_workflow_nodes WHERE node_id = :node_id;

-- name: workflow_parents_unfinished
-- How many parents of :node_id a re-armed node waits for again: those not succeeded.
SELECT COUNT(*)
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes p ON p.node_id = e.parent_id
WHERE e.child_id = :node_id AND p.state <> 'succeeded';

-- name: workflow_node_rearm
-- `outbox queue retry` of a failed ancestor: a skipped node waits again.
UPDATE outbox_workflow_nodes SET state = 'waiting', deps_left = :deps_left,
    finished_at = NULL, due_at = NULL
WHERE node_id = :node_id AND state = 'skipped';

-- name: workflow_node_requeued
-- `outbox queue retry` of a node's dead letter: the node is due again.
UPDATE outbox_workflow_nodes SET state = 'due', due_at = {now_ms}, finished_at = NULL
WHERE node_id = :node_id AND state = 'dead';

-- name: workflow_node_count_up
-- A waiting node that runs on failure counted its failed parent as done; that parent
-- runs again, so it waits for it again.
UPDATE outbox_workflow_nodes SET deps_left = deps_left + 1
WHERE node_id = :node_id AND state = 'waiting';

-- name: workflow_dead_delete
-- A skipped node's DependencyFailed dead letter, removed when it is re-armed.
DELETE FROM outbox_failed_jobs
WHERE message_id = :node_id AND exception_class = 'DependencyFailed';

-- name: workflow_parent_results
-- ctx.results: each parent's name, id, state and kept return value.
SELECT p.name, p.node_id, p.state, r.return_value
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes p ON p.node_id = e.parent_id
LEFT JOIN outbox_job_results r ON r.message_id = p.node_id AND r.status = 'SUCCESSFUL'
WHERE e.child_id = :node_id;

-- name: workflow_get
-- One workflow's own row.
SELECT workflow_id, name, state, node_count, created_at
FROM outbox_workflows WHERE workflow_id = :workflow_id;

-- fragment: workflow_node_columns
-- workflow_nodes_show's columns: every node of a workflow with what the queue (j), the
-- results (r) and the dead letters (f) say of its run: held by a worker (running),
-- attempts and times, and for a job in the queue its due time and last error class (a
-- retry's, as `outbox queue jobs` shows them). Never a payload.
SELECT n.node_id, n.name, n.job_name, n.queue, n.state, n.on_failure,
       n.created_at, n.due_at, n.finished_at,
       j.reserved_by, j.reserved_at, j.attempts, r.attempts, r.started_at, f.attempts,
       f.exception_class, j.available_at, j.last_error
FROM outbox_workflow_nodes n

-- fragment: workflow_nodes_joins
-- ... and how SQLite and MariaDB reach them: plain joins, which their planners run as a
-- lookup of the unique message_id a node, whatever the tables hold.
LEFT JOIN outbox_jobs j ON j.message_id = n.node_id
LEFT JOIN outbox_job_results r ON r.message_id = n.node_id
LEFT JOIN outbox_failed_jobs f ON f.message_id = n.node_id
WHERE n.workflow_id = :workflow_id
ORDER BY n.created_at, n.name

-- name: workflow_edges_show
-- Every edge of a workflow.
SELECT parent_id, child_id FROM outbox_workflow_edges WHERE workflow_id = :workflow_id;

-- name: workflow_cancel_mark
-- `outbox workflow cancel`: the workflow is cancelled (its state, for show).
UPDATE outbox_workflows SET state = 'cancelled'
WHERE workflow_id = :workflow_id AND state = 'running';

-- name: workflow_cancel_waiting_dead
-- Its waiting nodes: a dead letter each, class cancelled, never run.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at)
SELECT n.node_id, n.queue, n.job_name, n.payload, 0, n.max_attempts, 'cancelled',
       'cancelled by an operator (outbox workflow cancel)', '', n.priority, {now_ms}
FROM outbox_workflow_nodes n
WHERE n.workflow_id = :workflow_id AND n.state = 'waiting';

-- name: workflow_cancel_waiting
-- ... and are skipped.
UPDATE outbox_workflow_nodes SET state = 'skipped', finished_at = {now_ms}
WHERE workflow_id = :workflow_id AND state = 'waiting';

-- name: workflow_due_nodes
-- Its due nodes, for the cancellation of each (a queued job or a pending intent).
SELECT node_id FROM outbox_workflow_nodes
WHERE workflow_id = :workflow_id AND state = 'due';

-- name: workflow_cancel_intent
-- A due root still in the outbox (pending, or quarantined: `outbox retry` must not hand
-- a cancelled node off later): out of it (its dead letter follows).
DELETE FROM outbox_messages WHERE message_id = :node_id;

-- name: workflow_cancel_intent_dead
-- A cancelled root that never reached the queue: its dead letter.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at)
SELECT n.node_id, n.queue, n.job_name, n.payload, 0, n.max_attempts, 'cancelled',
       'cancelled by an operator (outbox workflow cancel)', '', n.priority, {now_ms}
FROM outbox_workflow_nodes n WHERE n.node_id = :node_id;

-- name: workflow_node_skip
-- A cancelled due node that never reached the queue: skipped.
UPDATE outbox_workflow_nodes SET state = 'skipped', finished_at = {now_ms}
WHERE node_id = :node_id AND state = 'due';

-- name: workflow_list
-- The newest workflows (the dashboard's list): ids, names, states, counts. No payloads.
SELECT w.workflow_id, w.name, w.state, w.node_count, w.created_at,
       (SELECT COUNT(*) FROM outbox_workflow_nodes n
        WHERE n.workflow_id = w.workflow_id AND n.state IN ('succeeded', 'dead', 'skipped'))
FROM outbox_workflows w
ORDER BY w.created_at DESC, w.workflow_id DESC
LIMIT :limit;

-- name: workflow_prune_pick
-- `outbox prune DAYS`: finished workflows (no node waiting or due) recorded before
-- :before_ms, oldest first.
SELECT w.workflow_id FROM outbox_workflows w
WHERE w.created_at < :before_ms
  AND NOT EXISTS (SELECT 1 FROM outbox_workflow_nodes n
                  WHERE n.workflow_id = w.workflow_id AND n.state IN ('waiting', 'due'))
ORDER BY w.created_at
LIMIT :batch;

-- name: workflow_delete_edges
DELETE FROM outbox_workflow_edges WHERE workflow_id = :workflow_id;

-- name: workflow_delete_nodes
DELETE FROM outbox_workflow_nodes WHERE workflow_id = :workflow_id;

-- name: workflow_delete
DELETE FROM outbox_workflows WHERE workflow_id = :workflow_id;

-- name: workflow_status_counts
-- `outbox status`: workflows with a node not finished, and the nodes waiting for a
-- dependency (no queue count shows those: a node is a job only once it is due). A scan
-- of the nodes, which prune keeps to the workflows still stored; status is not hot.
SELECT count(DISTINCT workflow_id), count(CASE WHEN state = 'waiting' THEN 1 END)
FROM outbox_workflow_nodes WHERE state IN ('waiting', 'due');
