-- Workflows on PostgreSQL: the recording statements read their rows from one jsonb
-- parameter, so a workflow of 1,000 nodes is a fixed number of statements whatever its size.

-- name: workflow_key_insert
-- The workflow's idempotency key row; a replay finds the existing one (record_lookup,
-- whose fresh READ COMMITTED snapshot sees a racing winner once ON CONFLICT waited).
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
SELECT r.v ->> 0, :workflow_id, r.v ->> 1, r.v ->> 2, r.v ->> 3, r.v ->> 4,
       CAST(r.v ->> 5 AS integer), CAST(r.v ->> 6 AS smallint), r.v ->> 7,
       CAST(r.v ->> 8 AS integer),
       CASE WHEN CAST(r.v ->> 8 AS integer) = 0 THEN 'due' ELSE 'waiting' END,
       {now_ms},
       CASE WHEN CAST(r.v ->> 8 AS integer) = 0 THEN {now_ms} END
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (v, ord)
ORDER BY r.ord;

-- name: workflow_edges_insert
-- Every edge from a JSON array of [parent_id, child_id].
INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)
SELECT r.v ->> 0, r.v ->> 1, :workflow_id
FROM jsonb_array_elements(CAST(:edges AS jsonb)) AS r (v);

-- name: workflow_roots_insert
-- The roots as ordinary intents (the relay hands them off), from the nodes' rows.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority)
SELECT r.v ->> 0, r.v ->> 9, r.v ->> 10, r.v ->> 2, r.v ->> 3, r.v ->> 4,
       CAST(r.v ->> 5 AS integer), CAST(:available_at AS bigint), 'pending', {now_ms}, 1,
       CAST(r.v ->> 6 AS smallint)
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (v, ord)
WHERE CAST(r.v ->> 8 AS integer) = 0
ORDER BY r.ord;

-- name: workflow_children
-- The children of :node_id with their state and failure rule, locked: a failure that
-- skips them and a parent's acknowledgement that counts them down cannot interleave.
SELECT n.node_id, n.state, n.on_failure
FROM outbox_workflow_edges e
JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
WHERE e.parent_id = :node_id
FOR UPDATE OF n;

-- name: workflow_children_enqueue
-- The children of :node_id that wait for nothing more become ordinary jobs, due now,
-- with one payload-less NOTIFY on the jobs' channel (delivered on commit) when any did:
-- idle workers wake at once, as for a push, instead of at their next poll.
WITH ins AS (
    INSERT INTO outbox_jobs
        (message_id, queue, job_name, payload, attempts, max_attempts, available_at,
         created_at, priority)
    SELECT n.node_id, n.queue, n.job_name, n.payload, 0, n.max_attempts, {now_ms}, {now_ms},
           n.priority
    FROM outbox_workflow_edges e
    JOIN outbox_workflow_nodes n ON n.node_id = e.child_id
    WHERE e.parent_id = :node_id AND n.state = 'waiting' AND n.deps_left = 0
    RETURNING 1
)
SELECT pg_notify('outbox_jobs', '') FROM (SELECT 1 FROM ins LIMIT 1) AS any_row;

-- name: workflow_nodes_show
-- `outbox workflow show`: every node of a workflow (outbox.db.workflows.show_plan). Each
-- node's job, result and dead letter by a lookup of its unique message_id, always: as
-- plain joins the planner hashes the whole queue once a workflow's node count makes
-- that look cheaper than a lookup per node (200,000 jobs against 1,000 nodes, 1M jobs
-- against 10,000), and a show then reads every job. LIMIT 1 (the key is unique) keeps
-- each LATERAL subquery a lookup: without it PostgreSQL flattens it into the join.
{fragment:workflow_node_columns}
LEFT JOIN LATERAL (
    SELECT reserved_by, reserved_at, attempts, available_at, last_error FROM outbox_jobs
    WHERE message_id = n.node_id LIMIT 1) AS j ON true
LEFT JOIN LATERAL (
    SELECT attempts, started_at FROM outbox_job_results
    WHERE message_id = n.node_id LIMIT 1) AS r ON true
LEFT JOIN LATERAL (
    SELECT attempts, exception_class FROM outbox_failed_jobs
    WHERE message_id = n.node_id LIMIT 1) AS f ON true
WHERE n.workflow_id = :workflow_id
ORDER BY n.created_at, n.name;
