-- name: record_insert
-- One intent. MariaDB has no INSERT ... RETURNING with ON DUPLICATE KEY, so the
-- no-op update keeps a duplicate key from failing and record_lookup decides.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))
ON DUPLICATE KEY UPDATE id = id;

-- name: record_lookup
-- A locking read: it sees the latest committed row even under REPEATABLE READ,
-- where a plain SELECT would read the transaction's old snapshot.
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest
LOCK IN SHARE MODE;
