-- Workflows on MariaDB/MySQL: the recording statements read their rows from one JSON
-- parameter (JSON_TABLE), so a workflow of 1,000 nodes is a fixed number of statements whatever its
-- size.

-- name: workflow_key_insert
-- The workflow's idempotency key row; the no-op update keeps a duplicate from failing
-- and record_lookup (a locking read, latest committed) decides.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
ON DUPLICATE KEY UPDATE key_digest = key_digest;

-- name: workflow_nodes_insert
-- Every node from a JSON array of rows [node_id, name, job_name, queue, payload,
-- max_attempts, priority, on_failure, dependency count, intent key digest, intent
-- fingerprint]:
-- a root is due at once (its intent follows), the others wait.
INSERT INTO outbox_workflow_nodes
    (node_id, workflow_id, name, job_name, queue, payload, max_attempts, priority,
     on_failure, deps_left, state, created_at, due_at)
SELECT r.node_id, :workflow_id, r.name, r.job_name, r.queue, r.payload, r.max_attempts,
       r.priority, r.on_failure, r.deps,
       CASE WHEN r.deps = 0 THEN 'due' ELSE 'waiting' END, {now_ms},
       CASE WHEN r.deps = 0 THEN {now_ms} END
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    ord FOR ORDINALITY,
    node_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    job_name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
    max_attempts INT PATH '$[5]',
    priority SMALLINT PATH '$[6]',
    on_failure VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[7]',
    deps INT PATH '$[8]'
)) AS r
ORDER BY r.ord;

-- name: workflow_edges_insert
-- Every edge from a JSON array of [parent_id, child_id].
INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)
SELECT r.parent_id, r.child_id, :workflow_id
FROM JSON_TABLE(:edges, '$[*]' COLUMNS (
    parent_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    child_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]'
)) AS r;

-- name: workflow_roots_insert
-- The roots as ordinary intents (the relay hands them off), from the nodes' rows.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority)
SELECT r.node_id, r.key_digest, r.fingerprint, r.job_name, r.queue, r.payload,
       r.max_attempts, :available_at, 'pending', {now_ms}, 1, r.priority
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    ord FOR ORDINALITY,
    node_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    job_name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
    max_attempts INT PATH '$[5]',
    priority SMALLINT PATH '$[6]',
    deps INT PATH '$[8]',
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[9]',
    fingerprint VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[10]'
)) AS r
WHERE r.deps = 0
ORDER BY r.ord;

-- name: workflow_children
-- The children of :node_id with their state and failure rule, locked (a locking read:
-- the latest committed rows even under REPEATABLE READ).
SELECT n.node_id, n.state, n.on_failure
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
WHERE e.parent_id = :node_id
FOR UPDATE;

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
