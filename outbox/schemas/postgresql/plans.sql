-- name: plan_seed_keys
-- Plan checks (outbox.db.plans): 2n key rows, the oldest first, in one set-based INSERT.
-- Keys n+1..2n belong to the intents plan_seed_messages writes; 1..n were handed off.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT lpad(g::text, 64, '0'), 'm' || lpad(g::text, 35, '0'), repeat('f', 64),
    c.now_ms - (2 * :n - g) * 10
FROM generate_series(1, 2 * CAST(:n AS integer)) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_messages
-- n intents of keys n+1..2n: every 20th quarantined, the rest pending.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, state, created_at,
     failed_at, failure_reason, keyed)
SELECT 'm' || lpad(g::text, 35, '0'), lpad(g::text, 64, '0'), repeat('f', 64), 't.noop',
    'default', '{"n": 1}', CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'pending' END,
    c.now_ms - (2 * :n - g) * 10,
    CASE WHEN g % 20 = 0 THEN c.now_ms END,
    CASE WHEN g % 20 = 0 THEN 'invalid_json' END, 1
FROM generate_series(CAST(:n AS integer) + 1, 2 * CAST(:n AS integer)) AS g,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_jobs
-- n jobs of keys 1..n: every 10th in queue 'other', every 2nd delayed an hour, every
-- 20th held by 'w:seed' (every 40th with its lease expired, every 200th cancelled by an
-- operator), priorities 0 to 9 in runs of three.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, available_at, reserved_at, reserved_by,
     lease_expires_at, created_at, priority, cancel_requested_at)
SELECT 'm' || lpad(g::text, 35, '0'), CASE WHEN g % 10 = 0 THEN 'other' ELSE 'default' END,
    't.noop', '{"n": 1}', CASE WHEN g % 20 = 1 THEN 1 ELSE 0 END,
    c.now_ms + CASE WHEN g % 2 = 0 THEN 3600000 ELSE -(CAST(:n AS integer) - g) END,
    CASE WHEN g % 20 = 1 THEN c.now_ms END,
    CASE WHEN g % 20 = 1 THEN 'w:seed' END,
    CASE WHEN g % 40 = 1 THEN c.now_ms - 1000 WHEN g % 20 = 1 THEN c.now_ms + 30000 END,
    c.now_ms - (CAST(:n AS integer) - g), (g / 3) % 10, CASE WHEN g % 200 = 1 THEN c.now_ms END
FROM generate_series(1, CAST(:n AS integer)) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_dead
-- n / 100 dead letters, spread over the two queues.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, exception_class, failed_at)
SELECT 'd' || lpad(g::text, 35, '0'), CASE WHEN g % 10 = 0 THEN 'other' ELSE 'default' END,
    't.noop', '{"n": 1}', 3, 'ValueError', c.now_ms
FROM generate_series(1, CAST(:n AS integer) / 100) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_paused
-- A few paused queues (an operator pauses a handful, never thousands); 'default' runs.
INSERT INTO outbox_paused_queues (queue, paused_at)
SELECT 'paused-' || lpad(g::text, 2, '0'), c.now_ms
FROM generate_series(1, 20) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limits
-- n / 100 limited keys (a concurrency_key per account, say): k00000000, k00000001, ...
INSERT INTO outbox_limits (limit_key, created_at)
SELECT 'k' || lpad(g::text, 8, '0'), c.now_ms
FROM generate_series(0, CAST(:n AS integer) / 100 - 1) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_starts
-- n starts over the n / 100 keys (100 each), one every 10 ms back from now; every 10th
-- a ticket of job g an hour ahead.
INSERT INTO outbox_limit_starts (limit_key, started_at, job_id)
SELECT 'k' || lpad((g % (CAST(:n AS integer) / 100))::text, 8, '0'),
    CASE WHEN g % 10 = 0 THEN c.now_ms + 3600000 ELSE c.now_ms - (CAST(:n AS integer) - g) * 10 END,
    CASE WHEN g % 10 = 0 THEN g END
FROM generate_series(1, CAST(:n AS integer)) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_slots
-- n / 10 running jobs' slots (10 a key), held by 'w:seed'; every 5th lease expired.
INSERT INTO outbox_limit_slots (limit_key, job_id, attempts, holder, expires_at)
SELECT 'k' || lpad((g % (CAST(:n AS integer) / 100))::text, 8, '0'), g, 1, 'w:seed',
    CASE WHEN g % 5 = 0 THEN c.now_ms - 1000 ELSE c.now_ms + 30000 END
FROM generate_series(1, CAST(:n AS integer) / 10) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_waits
-- n / 10 jobs waiting for a slot (10 a key), the jobs after the slots' holders.
INSERT INTO outbox_limit_waits (limit_key, job_id)
SELECT 'k' || lpad((g % (CAST(:n AS integer) / 100))::text, 8, '0'), CAST(:n AS integer) / 10 + g
FROM generate_series(1, CAST(:n AS integer) / 10) AS g;

-- name: plan_seed_ordering_keys
-- n ordering key rows (as many keys with a job in the queue), whose jobs are not seeded:
-- the reaper's heal must read a page of them, never all.
INSERT INTO outbox_ordering_keys (key_digest)
SELECT lpad(g::text, 64, '0') FROM generate_series(1, CAST(:n AS integer)) AS g;

-- name: plan_seed_workflows
-- n workflows, w…1, w…2, ...: the first n / 1,000 of 1,000 nodes each (today's largest,
-- seeded below), the others' nodes not seeded (the table's size is what counts here).
INSERT INTO outbox_workflows (workflow_id, name, state, node_count, created_at)
SELECT 'w' || lpad(g::text, 35, '0'), 'plan', 'running', 1000, c.now_ms - g
FROM generate_series(1, CAST(:n AS integer)) AS g, (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_workflow_nodes
-- n nodes, 1,000 a workflow, whose ids are the seeded jobs' message ids (so show's join
-- to the queue finds rows): each workflow's first node due, the others waiting for it.
INSERT INTO outbox_workflow_nodes
    (node_id, workflow_id, name, job_name, queue, payload, priority, on_failure, deps_left,
     state, created_at, due_at)
SELECT 'm' || lpad(g::text, 35, '0'), 'w' || lpad(((g - 1) / 1000 + 1)::text, 35, '0'),
    'n' || g, 't.noop', 'default', '{"n": 1}', 0, 'stop',
    CASE WHEN g % 1000 = 1 THEN 0 ELSE 1 END,
    CASE WHEN g % 1000 = 1 THEN 'due' ELSE 'waiting' END, c.now_ms,
    CASE WHEN g % 1000 = 1 THEN c.now_ms END
FROM generate_series(1, CAST(:n AS integer) / 1000 * 1000) AS g,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_workflow_edges
-- The fan-out of each workflow: its first node before each of its other 999.
INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)
SELECT 'm' || lpad(((g - 1) / 1000 * 1000 + 1)::text, 35, '0'), 'm' || lpad(g::text, 35, '0'),
    'w' || lpad(((g - 1) / 1000 + 1)::text, 35, '0')
FROM generate_series(1, CAST(:n AS integer) / 1000 * 1000) AS g
WHERE g % 1000 <> 1;

-- name: plan_analyze
-- Fresh statistics and visibility map after the bulk load, as autovacuum leaves them.
VACUUM ANALYZE outbox_keys, outbox_messages, outbox_jobs, outbox_failed_jobs,
    outbox_paused_queues, outbox_limits, outbox_limit_starts, outbox_limit_slots,
    outbox_limit_waits, outbox_ordering_keys, outbox_workflows, outbox_workflow_nodes,
    outbox_workflow_edges;
