-- name: inbox_claim
-- In the handler's transaction, before it runs: 1 row when this message id is new, 0
-- when a committed handler already wrote it (a redelivery: acknowledge, do not run).
-- A copy held by another open transaction makes this wait for its end.
INSERT INTO outbox_inbox (message_id, queue, handled_at)
VALUES (:message_id, :queue, {now_ms})
ON CONFLICT (message_id) DO NOTHING;

-- name: inbox_prune
-- At most :batch ids handled at least :age_ms ago, oldest first. No worker touches an
-- id this old, so no row lock is taken first (the operator role holds no UPDATE here).
DELETE FROM outbox_inbox
WHERE message_id IN (
    SELECT message_id FROM outbox_inbox
    WHERE handled_at <= {now_ms} - :age_ms
    ORDER BY handled_at
    LIMIT :batch
);

-- name: inbox_seen
-- Whether a committed handler had this message id (a job redelivered past its last
-- attempt is acknowledged, not dead-lettered, when it had).
SELECT 1 FROM outbox_inbox WHERE message_id = :message_id;
