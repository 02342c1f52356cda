-- Workflows on SQLite: the recording statements read their rows from one JSON parameter
-- (json_each), so a workflow of 1,000 nodes is a fixed number of statements whatever its size. One
-- writer at a time: no row locks to take.

-- name: workflow_key_insert
-- The workflow's idempotency key row; a replay finds the existing one (record_lookup).
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
ON CONFLICT (key_digest) DO NOTHING;

-- name: workflow_nodes_insert
-- Every node from a JSON array of rows [node_id, name, job_name, queue, payload,
-- max_attempts, priority, on_failure, dependency count, intent key digest, intent
-- fingerprint]:
-- a root is due at once (its intent follows), the others wait.
INSERT INTO outbox_workflow_nodes
    (node_id, workflow_id, name, job_name, queue, payload, max_attempts, priority,
     on_failure, deps_left, state, created_at, due_at)
SELECT json_extract(r.value, '$[0]'), :workflow_id, json_extract(r.value, '$[1]'),
       json_extract(r.value, '$[2]'), json_extract(r.value, '$[3]'),
       json_extract(r.value, '$[4]'), json_extract(r.value, '$[5]'),
       json_extract(r.value, '$[6]'), json_extract(r.value, '$[7]'),
       json_extract(r.value, '$[8]'),
       CASE WHEN json_extract(r.value, '$[8]') = 0 THEN 'due' ELSE 'waiting' END,
       {now_ms},
       CASE WHEN json_extract(r.value, '$[8]') = 0 THEN {now_ms} END
FROM json_each(:rows) AS r
ORDER BY r.key;

-- name: workflow_edges_insert
-- Every edge from a JSON array of [parent_id, child_id].
INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)
SELECT json_extract(r.value, '$[0]'), json_extract(r.value, '$[1]'), :workflow_id
FROM json_each(:edges) AS r;

-- name: workflow_roots_insert
-- The roots as ordinary intents (the relay hands them off), from the nodes' rows.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority)
SELECT json_extract(r.value, '$[0]'), json_extract(r.value, '$[9]'),
       json_extract(r.value, '$[10]'), json_extract(r.value, '$[2]'),
       json_extract(r.value, '$[3]'), json_extract(r.value, '$[4]'),
       json_extract(r.value, '$[5]'), :available_at, 'pending', {now_ms}, 1,
       json_extract(r.value, '$[6]')
FROM json_each(:rows) AS r
WHERE json_extract(r.value, '$[8]') = 0
ORDER BY r.key;

-- name: workflow_children
-- The children of :node_id with their state and failure rule (SQLite's writer lock
-- already keeps them still).
SELECT n.node_id, n.state, n.on_failure
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
WHERE e.parent_id = :node_id;

-- name: workflow_children_enqueue
-- The children of :node_id that wait for nothing more become ordinary jobs, due now.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority)
SELECT n.node_id, n.queue, n.job_name, n.payload, 0, n.max_attempts, {now_ms}, {now_ms},
       n.priority
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
WHERE e.parent_id = :node_id AND n.state = 'waiting' AND n.deps_left = 0;

-- name: workflow_nodes_show
-- `outbox workflow show`: every node of a workflow (outbox.db.workflows.show_plan).
{fragment:workflow_node_columns}
{fragment:workflow_nodes_joins};
