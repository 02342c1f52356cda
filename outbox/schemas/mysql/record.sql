-- name: record_insert_returning
-- MariaDB 10.5+: the key row first, returning its holder: ours when inserted, and on a
-- duplicate the existing row (ON DUPLICATE KEY UPDATE returns it, locked and latest
-- committed even under REPEATABLE READ), so no lookup follows. The intent follows only
-- if the key row is its own (record_insert_intent).
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
ON DUPLICATE KEY UPDATE key_digest = key_digest
RETURNING message_id, fingerprint;

-- name: record_insert
-- MySQL 8 (no INSERT ... RETURNING): the key row first; the no-op update keeps a
-- duplicate key from failing; the intent follows only if the key row is its own
-- (record_insert_intent), and record_lookup decides.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
ON DUPLICATE KEY UPDATE key_digest = key_digest;

-- name: record_lookup
-- A locking read: it sees the latest committed row even under REPEATABLE READ,
-- where a plain SELECT would read the transaction's old snapshot.
SELECT message_id, fingerprint FROM outbox_keys WHERE key_digest = :key_digest
LOCK IN SHARE MODE;

-- name: record_many_insert_returning
-- MariaDB 10.5+: as record_many_insert, returning every key's holder: ours for the new
-- keys, the existing (locked, latest committed) row for the others, so no lookup
-- follows.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT r.key_digest, r.message_id, r.fingerprint, {now_ms}
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    message_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    fingerprint VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]'
)) AS r
ON DUPLICATE KEY UPDATE key_digest = outbox_keys.key_digest
RETURNING key_digest, message_id, fingerprint;

-- name: record_many_insert
-- MySQL 8: up to 1,000 key rows in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at, priority, trace_context, ordering_key]. The no-op update keeps existing keys from failing;
-- record_many_lookup then reads every key's row (no RETURNING here).
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT r.key_digest, r.message_id, r.fingerprint, {now_ms}
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    message_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    fingerprint VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]'
)) AS r
ON DUPLICATE KEY UPDATE key_digest = outbox_keys.key_digest;

-- name: record_many_insert_intents
-- The intents of the batch whose key rows are their own, in the given order.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
SELECT k.message_id, k.key_digest, k.fingerprint, r.job_name, r.queue, r.payload,
       r.max_attempts, r.available_at, 'pending', k.created_at, 1, r.priority, r.trace_context, r.ordering_key
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    ord FOR ORDINALITY,
    message_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    job_name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]',
    max_attempts INT PATH '$[6]',
    available_at BIGINT PATH '$[7]',
    priority SMALLINT PATH '$[8]',
    trace_context VARCHAR(600) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[9]',
    ordering_key VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[10]'
)) AS r
JOIN outbox_keys AS k ON k.key_digest = r.key_digest AND k.message_id = r.message_id
ORDER BY r.ord;

-- name: record_many_lookup
-- Every key's row (a JSON array of digests), by the primary key. A locking read: it
-- sees the latest committed rows even under REPEATABLE READ.
SELECT k.key_digest, k.message_id, k.fingerprint
FROM JSON_TABLE(:key_digests, '$[*]' COLUMNS (
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$'
)) AS d
JOIN outbox_keys AS k ON k.key_digest = d.key_digest
LOCK IN SHARE MODE;
