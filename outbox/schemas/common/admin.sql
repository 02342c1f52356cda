-- name: status_state_counts
-- Intents by state, each half through its own partial index (outbox_messages_pending,
-- outbox_messages_not_pending; MariaDB: outbox_messages_state_id), so the few rows that
-- are not pending are never counted by reading the whole backlog.
SELECT 'pending', count(*) FROM outbox_messages WHERE state = 'pending'
UNION ALL
SELECT state, count(*) FROM outbox_messages WHERE state <> 'pending' GROUP BY state;

-- name: status_oldest_pending
-- The oldest pending intent by id (the pending index answers it without a scan), and
-- the database's clock to age it by.
SELECT
    (SELECT created_at FROM outbox_messages WHERE state = 'pending' ORDER BY id LIMIT 1),
    {now_ms};

-- name: status_key_count
-- Key rows: one per intent recorded and not yet pruned, handed off or not.
SELECT count(*) FROM outbox_keys;

-- name: status_pending_count
SELECT count(*) FROM outbox_messages WHERE state = 'pending';

-- name: queue_counts
-- Per queue: ready (due, not reserved), delayed (not yet due), reserved, and when the
-- oldest ready job fell due. One reading of the clock for every row.
SELECT queue,
    SUM(CASE WHEN reserved_by IS NULL AND available_at <= clock.now_ms THEN 1 ELSE 0 END),
    SUM(CASE WHEN reserved_by IS NULL AND available_at > clock.now_ms THEN 1 ELSE 0 END),
    SUM(CASE WHEN reserved_by IS NOT NULL THEN 1 ELSE 0 END),
    MIN(CASE WHEN reserved_by IS NULL AND available_at <= clock.now_ms THEN available_at END)
FROM outbox_jobs, (SELECT {now_ms} AS now_ms) AS clock
GROUP BY queue;

-- name: dead_counts
-- Dead letters per queue.
SELECT queue, count(*) FROM outbox_failed_jobs GROUP BY queue;

-- name: failed_list
-- Quarantined intents, oldest first: ids, reason codes and times, never payloads.
SELECT message_id, failure_reason, created_at, failed_at
FROM outbox_messages
WHERE state = 'failed'
ORDER BY id
LIMIT :limit;

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

-- name: retry_accept_key
-- ... and the key row takes the new fingerprint, so a replay compares against it.
UPDATE outbox_keys
SET fingerprint = :fingerprint
WHERE key_digest = (SELECT key_digest FROM outbox_messages WHERE id = :id);
