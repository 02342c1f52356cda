-- The dashboard's reads that all three dialects write alike (outbox/dashboard/store.py);
-- the others are in <dialect>/dashboard.sql.

-- name: dashboard_job
-- One queued job by message id (unique index), no payload.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, priority
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


-- name: dashboard_held_counts
-- Jobs held by workers, per queue: the lease index, whose rows are bounded by what the
-- workers hold (processes x prefetch), so this is not capped.
SELECT queue, count(*)
FROM outbox_jobs
WHERE reserved_by IS NOT NULL AND lease_expires_at IS NOT NULL
GROUP BY queue;
