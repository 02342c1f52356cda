-- Encryption key rotation (outbox/db/keys.py): each batch's rows were read, locked where
-- the dialect can (<dialect>/keys.sql), in the same short transaction, so these updates
-- by primary key meet no concurrent change.

-- name: keys_reseal_intent
-- A pending intent re-sealed: its fingerprint covers the payload, so both change.
UPDATE outbox_messages SET payload = :payload, fingerprint = :fingerprint WHERE id = :id;

-- name: keys_reseal_key
-- The intent's key row follows, so a replay matches the newest key's fingerprint (an
-- older key's still matches while that key is in the ring: outbox.record). Only the row
-- that names this intent: a workflow root's intent has no key row of its own.
UPDATE outbox_keys SET fingerprint = :fingerprint
WHERE key_digest = :key_digest AND message_id = :message_id;

-- name: keys_reseal_job
UPDATE outbox_jobs SET payload = :payload WHERE id = :id;

-- name: keys_reseal_dead
UPDATE outbox_failed_jobs
SET payload = :payload, exception_message = :exception_message,
    exception_trace = :exception_trace
WHERE id = :id;

-- name: keys_reseal_result
UPDATE outbox_job_results
SET payload = :payload, return_value = :return_value, exception_trace = :exception_trace
WHERE message_id = :id;

-- name: keys_reseal_node
UPDATE outbox_workflow_nodes SET payload = :payload WHERE node_id = :id;
