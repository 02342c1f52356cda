-- The dashboard's reads (outbox/dashboard/store.py). Every one is index-backed or reads
-- only the dead letters, which stay few; none reads a payload unless it says so.

-- name: dashboard_handed_off_per_minute
-- Intents the relay handed off, per minute (UNIX minute) since :since_ms: a range of the
-- published index (outbox_messages_published).
-- Prune removes tombstones, so a minute pruned away reads 0.
SELECT published_at / 60000 AS minute, count(*)
FROM outbox_messages
WHERE state = 'published' AND published_at >= :since_ms
GROUP BY published_at / 60000;

-- name: dashboard_dead_per_minute
-- Jobs dead-lettered, per minute since :since_ms. There is no index on failed_at: this
-- reads the dead letters, which an operator keeps few (retry or forget).
SELECT failed_at / 60000 AS minute, count(*)
FROM outbox_failed_jobs
WHERE failed_at >= :since_ms
GROUP BY failed_at / 60000;

-- name: dashboard_jobs_ready
-- Due, unheld jobs of one queue, next due first: the claim index (outbox_jobs_claim).
-- Keyset paging on (available_at, id): page N costs what page 1 costs.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NULL AND available_at <= {now_ms}
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_delayed
-- Unheld jobs not yet due, soonest first: the claim index again.
-- Keyset paging on (available_at, id): page N costs what page 1 costs.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NULL AND available_at > {now_ms}
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_reserved
-- Jobs a worker holds, soonest lease expiry first: the lease index.
-- Keyset paging on (lease_expires_at, id): page N costs what page 1 costs.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NOT NULL
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
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
-- One intent by message id (unique index), no payload: pending, published or quarantined.
SELECT message_id, job_name, queue, state, max_attempts, available_at, created_at,
       published_at, failed_at, failure_reason
FROM outbox_messages
WHERE message_id = :message_id;

-- name: dashboard_job_payload
-- A queued job's payload: only for a signed-in operator of a dashboard started with
-- --show-payloads.
SELECT payload FROM outbox_jobs WHERE message_id = :message_id;

-- name: dashboard_dead_payload
-- A dead letter's payload, on the same terms.
SELECT payload FROM outbox_failed_jobs WHERE message_id = :message_id;

-- name: dashboard_intent_payload
-- A pending or quarantined intent's payload, on the same terms (handed off: NULL).
SELECT payload FROM outbox_messages WHERE message_id = :message_id;
