-- name: record_insert
-- One intent; no row back when the key already exists (then record_lookup decides).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
ON CONFLICT (key_digest) DO NOTHING
RETURNING message_id;

-- name: record_lookup
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest;
