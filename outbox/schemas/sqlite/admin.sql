-- name: retry_lookup
-- The intent to return to pending, locked while it is re-verified.
SELECT id, message_id, state, fingerprint, job_name, queue, payload, max_attempts,
    available_at
FROM outbox_messages
WHERE message_id = :message_id;

-- name: prune_batch
-- At most :batch published tombstones published at least :age_ms ago, oldest first.
-- Pending and failed rows never match.
DELETE FROM outbox_messages
WHERE id IN (
    SELECT id FROM outbox_messages
    WHERE state = 'published'
        AND published_at <= {now_ms} - :age_ms
    ORDER BY published_at
    LIMIT :batch
);
