-- The dashboard's reads (outbox/dashboard/store.py). Every one is index-backed or reads
-- only the dead letters, which stay few; none reads a payload unless it says so.

-- name: dashboard_recorded_per_minute
-- Intents recorded, per minute (UNIX minute) since :since_ms: a range of the key rows'
-- age index (outbox_keys_created), read from the index alone. Every intent has a key row
-- from the moment it is recorded, whether it is pending, quarantined or handed off since,
-- until `outbox prune` removes it: a minute pruned away reads 0.
SELECT created_at DIV 60000 AS minute, count(*)
FROM outbox_keys
WHERE created_at >= :since_ms
GROUP BY created_at DIV 60000;

-- name: dashboard_dead_per_minute
-- Jobs dead-lettered, per minute since :since_ms. There is no index on failed_at: this
-- reads the dead letters, which an operator keeps few (retry or forget).
SELECT failed_at DIV 60000 AS minute, count(*)
FROM outbox_failed_jobs
WHERE failed_at >= :since_ms
GROUP BY failed_at DIV 60000;

-- name: dashboard_jobs_ready
-- Due, unheld jobs of one queue, next due first: the claim index (outbox_jobs_claim).
-- The clock is a subquery so PostgreSQL reads it once and bounds the index range by it
-- (inline, clock_timestamp() is volatile: a filter over every row of the queue).
-- Keyset paging on (available_at, id): page N costs what page 1 costs (the >= bound
-- starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT {now_ms})
  AND (:job_name IS NULL OR job_name = :job_name)
  AND available_at >= :after_at
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_delayed
-- Unheld jobs not yet due, soonest first: the claim index again.
-- Keyset paging on (available_at, id): page N costs what page 1 costs (the >= bound
-- starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NULL AND available_at > (SELECT {now_ms})
  AND (:job_name IS NULL OR job_name = :job_name)
  AND available_at >= :after_at
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_reserved
-- Jobs a worker holds, soonest lease expiry first: the lease index.
-- Keyset paging on (lease_expires_at, id): page N costs what page 1 costs (the >= bound
-- starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NOT NULL
  AND (:job_name IS NULL OR job_name = :job_name)
  AND lease_expires_at >= :after_at
  AND (lease_expires_at > :after_at OR (lease_expires_at = :after_at AND id > :after_id))
ORDER BY lease_expires_at, id
LIMIT :limit;

-- name: dashboard_job
-- One queued job by message id (unique index), no payload.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error
FROM outbox_jobs
WHERE message_id = :message_id;

-- name: dashboard_intent
-- One intent still in the outbox by message id (unique index), no payload: pending or
-- quarantined. A handed-off intent has left the table; a 'published' row is a tombstone
-- a version-1 relay left during a rolling upgrade, and reads as handed off (not found).
SELECT message_id, job_name, queue, state, max_attempts, available_at, created_at,
       failed_at, failure_reason
FROM outbox_messages
WHERE message_id = :message_id AND state <> 'published';

-- name: dashboard_job_payload
-- A queued job's payload: only for a signed-in operator of a dashboard started with
-- --show-payloads.
SELECT payload FROM outbox_jobs WHERE message_id = :message_id;

-- name: dashboard_dead_payload
-- A dead letter's payload, on the same terms.
SELECT payload FROM outbox_failed_jobs WHERE message_id = :message_id;

-- name: dashboard_intent_payload
-- A pending or quarantined intent's payload, on the same terms.
SELECT payload FROM outbox_messages WHERE message_id = :message_id AND state <> 'published';

-- name: dashboard_outbox_counts
-- Pending and quarantined intents, each counted up to :cap rows of its index (the
-- pending/failed partial indexes; state + id on MariaDB), so leftover version-1
-- tombstones cost nothing; the oldest pending intent by id; the database's clock.
SELECT
    (SELECT count(*) FROM
        (SELECT 1 AS one FROM outbox_messages WHERE state = 'pending' LIMIT :cap) AS p),
    (SELECT count(*) FROM
        (SELECT 1 AS one FROM outbox_messages WHERE state = 'failed' LIMIT :cap) AS f),
    (SELECT created_at FROM outbox_messages WHERE state = 'pending' ORDER BY id LIMIT 1),
    {now_ms};

-- name: dashboard_queue_counts
-- One queue's ready, delayed and dead jobs, each counted up to :cap: ranges of the claim
-- index (queue, available_at) and of the dead letters' (queue, id) index. MariaDB lets no
-- derived table see an outer one, so each count reads the clock itself.
SELECT
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_jobs
        WHERE queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT {now_ms})
        LIMIT :cap) AS r),
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_jobs
        WHERE queue = :queue AND reserved_by IS NULL AND available_at > (SELECT {now_ms})
        LIMIT :cap) AS d),
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_failed_jobs
        WHERE queue = :queue LIMIT :cap) AS x);

-- name: dashboard_queue_names
-- Every queue with a job or a dead letter, without reading every row: a loose index scan
-- (one MIN probe per queue) of the claim index, which on MariaDB holds held rows too,
-- and of the dead letters' (queue, id) index.
WITH RECURSIVE jobs AS (
    SELECT (SELECT MIN(queue) FROM outbox_jobs) AS queue
    UNION ALL
    SELECT (SELECT MIN(j.queue) FROM outbox_jobs j WHERE j.queue > jobs.queue)
    FROM jobs WHERE jobs.queue IS NOT NULL
), dead AS (
    SELECT (SELECT MIN(queue) FROM outbox_failed_jobs) AS queue
    UNION ALL
    SELECT (SELECT MIN(f.queue) FROM outbox_failed_jobs f WHERE f.queue > dead.queue)
    FROM dead WHERE dead.queue IS NOT NULL
)
SELECT queue FROM jobs WHERE queue IS NOT NULL
UNION
SELECT queue FROM dead WHERE queue IS NOT NULL;

-- name: dashboard_held_counts
-- Jobs held by workers, per queue: the lease index, whose rows are bounded by what the
-- workers hold (processes x prefetch), so this is not capped.
SELECT queue, count(*)
FROM outbox_jobs
WHERE reserved_by IS NOT NULL AND lease_expires_at IS NOT NULL
GROUP BY queue;
