-- name: status_state_counts
SELECT state, count(*) FROM outbox_messages GROUP BY state;

-- name: status_oldest_pending
-- The oldest pending intent by id (the pending index answers it without a scan), and
-- the database's clock to age it by.
SELECT
    (SELECT created_at FROM outbox_messages WHERE state = 'pending' ORDER BY id LIMIT 1),
    CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED);

-- name: status_pending_count
SELECT count(*) FROM outbox_messages WHERE state = 'pending';

-- name: status_queue_counts
-- Per queue: ready (due, not reserved), delayed (not yet due), reserved.
SELECT queue,
    SUM(CASE WHEN reserved_by IS NULL AND available_at <= clock.now_ms THEN 1 ELSE 0 END),
    SUM(CASE WHEN reserved_by IS NULL AND available_at > clock.now_ms THEN 1 ELSE 0 END),
    SUM(CASE WHEN reserved_by IS NOT NULL THEN 1 ELSE 0 END)
FROM outbox_jobs, (SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS now_ms) AS clock
GROUP BY queue;

-- name: status_dead_counts
SELECT queue, count(*) FROM outbox_failed_jobs GROUP BY queue;

-- name: failed_list
-- Quarantined intents, oldest first: ids, reason codes and times, never payloads.
SELECT message_id, failure_reason, created_at, failed_at
FROM outbox_messages
WHERE state = 'failed'
ORDER BY id
LIMIT :limit;

-- name: retry_lookup
-- The intent to return to pending, locked while it is re-verified.
SELECT id, message_id, state, fingerprint, job_name, queue, payload, max_attempts,
    available_at
FROM outbox_messages
WHERE message_id = :message_id
FOR UPDATE;

-- name: retry_requeue
UPDATE outbox_messages
SET state = 'pending', failed_at = NULL, failure_reason = NULL
WHERE id = :id AND state = 'failed';

-- name: retry_accept
-- The operator accepted the row's current contents: canonical payload, new fingerprint.
UPDATE outbox_messages
SET state = 'pending', payload = :payload, fingerprint = :fingerprint,
    failed_at = NULL, failure_reason = NULL
WHERE id = :id AND state = 'failed';

-- name: prune_batch
-- At most :batch published tombstones published at least :age_ms ago, oldest first.
-- Pending and failed rows never match.
DELETE FROM outbox_messages
WHERE state = 'published'
    AND published_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - :age_ms
ORDER BY published_at
LIMIT :batch;
