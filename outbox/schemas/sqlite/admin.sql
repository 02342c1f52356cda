-- name: retry_lookup
-- The intent to return to pending, locked while it is re-verified.
SELECT id, message_id, state, fingerprint, job_name, queue, payload, max_attempts,
    available_at, priority, ordering_key
FROM outbox_messages
WHERE message_id = :message_id;

-- name: prune_tombstones
-- At most :batch tombstones (left by a version-1 relay, or by the rolling-upgrade
-- trigger of migration 2) published at least :age_ms ago, oldest first. Pending and
-- failed rows never match. (The redundant state <> 'pending' lets SQLite's planner use the
-- partial index outbox_messages_not_pending: it matches index predicates by their terms.)
DELETE FROM outbox_messages
WHERE id IN (
    SELECT id FROM outbox_messages
    WHERE state = 'published' AND state <> 'pending'
        AND published_at <= {now_ms} - :age_ms
    ORDER BY published_at
    LIMIT :batch
);

-- name: prune_keys
-- At most :batch key rows recorded at least :age_ms ago whose intents were handed off
-- (no row of theirs is left in outbox_messages), oldest first. The key of a pending or
-- quarantined intent never matches, nor the key of a workflow still stored (its key row
-- names the workflow; outbox prune drops finished workflows first). This ends
-- deduplication for those keys.
-- An intent carries its key row's message_id, so the unique message_id index finds it
-- (outbox_messages.key_digest has no index since the contract step).
DELETE FROM outbox_keys
WHERE key_digest IN (
    SELECT k.key_digest FROM outbox_keys AS k
    WHERE k.created_at <= {now_ms} - :age_ms
        AND NOT EXISTS (SELECT 1 FROM outbox_messages AS m WHERE m.message_id = k.message_id)
        AND NOT EXISTS (SELECT 1 FROM outbox_workflows AS w WHERE w.workflow_id = k.message_id)
    ORDER BY k.created_at
    LIMIT :batch
);
