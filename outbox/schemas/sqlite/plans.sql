-- name: plan_seed_keys
-- Plan checks (outbox.db.plans): 2n key rows, the oldest first, in one set-based INSERT.
-- Keys n+1..2n belong to the intents plan_seed_messages writes; 1..n were handed off.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT printf('%064d', g), printf('m%035d', g), 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff',
    c.now_ms - (2 * :n - g) * 10
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 2 * :n) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_messages
-- n intents of keys n+1..2n: every 20th quarantined, the rest pending.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, state, created_at,
     failed_at, failure_reason, keyed)
SELECT printf('m%035d', g), printf('%064d', g), 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', 't.noop',
    'default', '{"n": 1}', CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'pending' END,
    c.now_ms - (2 * :n - g) * 10,
    CASE WHEN g % 20 = 0 THEN c.now_ms END,
    CASE WHEN g % 20 = 0 THEN 'invalid_json' END, 1
FROM (WITH RECURSIVE s(g) AS (SELECT :n + 1 UNION ALL SELECT g + 1 FROM s WHERE g < 2 * :n) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_jobs
-- n jobs of keys 1..n: every 10th in queue 'other', every 2nd delayed an hour, every
-- 20th held by 'w:seed' (every 40th with its lease expired, every 200th cancelled by an
-- operator), priorities 0 to 9 in runs of three.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, available_at, reserved_at, reserved_by,
     lease_expires_at, created_at, priority, cancel_requested_at)
SELECT printf('m%035d', g), CASE WHEN g % 10 = 0 THEN 'other' ELSE 'default' END,
    't.noop', '{"n": 1}', CASE WHEN g % 20 = 1 THEN 1 ELSE 0 END,
    c.now_ms + CASE WHEN g % 2 = 0 THEN 3600000 ELSE -(:n - g) END,
    CASE WHEN g % 20 = 1 THEN c.now_ms END,
    CASE WHEN g % 20 = 1 THEN 'w:seed' END,
    CASE WHEN g % 40 = 1 THEN c.now_ms - 1000 WHEN g % 20 = 1 THEN c.now_ms + 30000 END,
    c.now_ms - (:n - g), (g / 3) % 10, CASE WHEN g % 200 = 1 THEN c.now_ms END
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_dead
-- n / 100 dead letters, spread over the two queues.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, exception_class, failed_at)
SELECT printf('d%035d', g), CASE WHEN g % 10 = 0 THEN 'other' ELSE 'default' END,
    't.noop', '{"n": 1}', 3, 'ValueError', c.now_ms
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 100) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_paused
-- A few paused queues (an operator pauses a handful, never thousands); 'default' runs.
INSERT INTO outbox_paused_queues (queue, paused_at)
SELECT printf('paused-%02d', g), c.now_ms
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 20) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limits
-- n / 100 limited keys (a concurrency_key per account, say): k00000000, k00000001, ...
INSERT INTO outbox_limits (limit_key, created_at)
SELECT printf('k%08d', g - 1), c.now_ms
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 100) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_starts
-- n starts over the n / 100 keys (100 each), one every 10 ms back from now; every 10th
-- a ticket of job g an hour ahead.
INSERT INTO outbox_limit_starts (limit_key, started_at, job_id)
SELECT printf('k%08d', g % (:n / 100)),
    CASE WHEN g % 10 = 0 THEN c.now_ms + 3600000 ELSE c.now_ms - (:n - g) * 10 END,
    CASE WHEN g % 10 = 0 THEN g END
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_slots
-- n / 10 running jobs' slots (10 a key), held by 'w:seed'; every 5th lease expired.
INSERT INTO outbox_limit_slots (limit_key, job_id, attempts, holder, expires_at)
SELECT printf('k%08d', g % (:n / 100)), g, 1, 'w:seed',
    CASE WHEN g % 5 = 0 THEN c.now_ms - 1000 ELSE c.now_ms + 30000 END
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 10) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_limit_waits
-- n / 10 jobs waiting for a slot (10 a key), the jobs after the slots' holders.
INSERT INTO outbox_limit_waits (limit_key, job_id)
SELECT printf('k%08d', g % (:n / 100)), :n / 10 + g
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 10) SELECT g FROM s) AS s;

-- name: plan_seed_ordering_keys
-- n ordering key rows (as many keys with a job in the queue), whose jobs are not seeded:
-- the reaper's heal must read a page of them, never all.
INSERT INTO outbox_ordering_keys (key_digest)
SELECT printf('%064d', g)
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) SELECT g FROM s) AS s;

-- name: plan_seed_workflows
-- n workflows, w…1, w…2, ...: the first n / 1,000 of 1,000 nodes each (today's largest,
-- seeded below), the others' nodes not seeded (the table's size is what counts here).
INSERT INTO outbox_workflows (workflow_id, name, state, node_count, created_at)
SELECT printf('w%035d', g), 'plan', 'running', 1000, c.now_ms - g
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_workflow_nodes
-- n nodes, 1,000 a workflow, whose ids are the seeded jobs' message ids (so show's join
-- to the queue finds rows): each workflow's first node due, the others waiting for it.
INSERT INTO outbox_workflow_nodes
    (node_id, workflow_id, name, job_name, queue, payload, priority, on_failure, deps_left,
     state, created_at, due_at)
SELECT printf('m%035d', g), printf('w%035d', (g - 1) / 1000 + 1), 'n' || g, 't.noop',
    'default', '{"n": 1}', 0, 'stop', CASE WHEN g % 1000 = 1 THEN 0 ELSE 1 END,
    CASE WHEN g % 1000 = 1 THEN 'due' ELSE 'waiting' END, c.now_ms,
    CASE WHEN g % 1000 = 1 THEN c.now_ms END
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 1000 * 1000) SELECT g FROM s) AS s,
    (SELECT {now_ms} AS now_ms) AS c;

-- name: plan_seed_workflow_edges
-- The fan-out of each workflow: its first node before each of its other 999.
INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)
SELECT printf('m%035d', (g - 1) / 1000 * 1000 + 1), printf('m%035d', g),
    printf('w%035d', (g - 1) / 1000 + 1)
FROM (WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n / 1000 * 1000) SELECT g FROM s) AS s
WHERE g % 1000 <> 1;

-- name: plan_analyze
-- Fresh statistics and visibility map after the bulk load, as autovacuum leaves them.
ANALYZE;
