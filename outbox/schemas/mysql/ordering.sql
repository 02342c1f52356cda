-- name: ordering_lock
-- Lock the key's row, creating it if the key has none: entering the line and leaving
-- it both start here, so the two serialise per key (the no-op update takes the lock).
INSERT INTO outbox_ordering_keys (key_digest, created_at)
VALUES (:ordering_key, {now_ms})
ON DUPLICATE KEY UPDATE created_at = outbox_ordering_keys.created_at;

-- name: ordering_any_job
-- Has the key a job in the queue (in its turn or waiting), or a dead letter that holds
-- it (dead_letter_holds_key)? Read after ordering_lock. Locking reads: they see the
-- latest committed rows even in a caller's REPEATABLE READ transaction (push), whose
-- snapshot may predate the last job's acknowledgement.
(SELECT id FROM outbox_jobs WHERE ordering_key = :ordering_key LIMIT 1 LOCK IN SHARE MODE)
UNION ALL
(SELECT id FROM outbox_failed_jobs WHERE ordering_key = :ordering_key AND ordering_held = 1
 LIMIT 1 LOCK IN SHARE MODE);

-- name: relay_block_jobs
-- The relay's keyed rows (outbox ids, :ids) that entered behind another job of their
-- key wait their turn; run after relay_insert_jobs, before relay_delete_moved.
UPDATE outbox_jobs SET available_at = available_at + {blocked_offset_ms}
WHERE message_id IN (SELECT message_id FROM outbox_messages WHERE id IN :ids)
  AND available_at < {blocked_offset_ms};

-- name: relay_ordering_earlier
-- For each key of a batch, its oldest pending intent outside the batch (another relay
-- holds it, or it was deferred): the batch's later intents of that key wait for it.
SELECT ordering_key, min(id) FROM outbox_messages
WHERE ordering_key IN :keys AND state = 'pending' AND id NOT IN :ids
GROUP BY ordering_key;
