-- name: record_insert
-- One intent. MariaDB has no INSERT ... RETURNING with ON DUPLICATE KEY, so the
-- no-op update keeps a duplicate key from failing and record_lookup decides.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', {now_ms})
ON DUPLICATE KEY UPDATE id = id;

-- name: record_lookup
-- A locking read: it sees the latest committed row even under REPEATABLE READ,
-- where a plain SELECT would read the transaction's old snapshot.
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest
LOCK IN SHARE MODE;

-- name: record_many_insert
-- Up to 1,000 intents in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at], in the given order. The no-op update keeps existing keys from failing;
-- record_many_lookup then reads every key's row (no RETURNING here).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
SELECT r.message_id, r.key_digest, r.fingerprint, r.job_name, r.queue, r.payload,
       r.max_attempts, r.available_at, 'pending',
       {now_ms}
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    ord FOR ORDINALITY,
    message_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    fingerprint VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
    job_name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]',
    max_attempts INT PATH '$[6]',
    available_at BIGINT PATH '$[7]'
)) AS r
ORDER BY r.ord
ON DUPLICATE KEY UPDATE id = id;

-- name: record_many_lookup
-- Every key's row (a JSON array of digests), by the unique index. A locking read: it
-- sees the latest committed rows even under REPEATABLE READ.
SELECT m.key_digest, m.message_id, m.fingerprint
FROM JSON_TABLE(:key_digests, '$[*]' COLUMNS (
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$'
)) AS d
JOIN outbox_messages AS m ON m.key_digest = d.key_digest
LOCK IN SHARE MODE;
