-- name: record_insert
-- One intent; no row back when the key already exists (then record_lookup decides).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
ON CONFLICT (key_digest) DO NOTHING
RETURNING message_id;

-- name: record_insert_notify
-- As record_insert, plus a payload-less NOTIFY that PostgreSQL delivers only on commit.
WITH ins AS (
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
         available_at, state, created_at)
    VALUES
        (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
         :available_at, 'pending', (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING message_id
)
SELECT message_id, pg_notify('outbox_relay', '') FROM ins;

-- name: record_lookup
-- The row that holds the key. Under READ COMMITTED this statement's fresh snapshot
-- sees a racing transaction's row once ON CONFLICT has waited for it to commit.
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest;
