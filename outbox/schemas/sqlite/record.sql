-- name: record_insert
-- One intent; no row back when the key already exists (then record_lookup decides).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', {now_ms})
ON CONFLICT (key_digest) DO NOTHING
RETURNING message_id;

-- name: record_lookup
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest;

-- name: record_many_insert
-- Up to 1,000 intents in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at], in the given order. "WHERE true" keeps ON CONFLICT from parsing as a
-- join constraint. Rows whose key already exists come back missing.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
SELECT json_extract(r.value, '$[0]'), json_extract(r.value, '$[1]'),
       json_extract(r.value, '$[2]'), json_extract(r.value, '$[3]'),
       json_extract(r.value, '$[4]'), json_extract(r.value, '$[5]'),
       json_extract(r.value, '$[6]'), json_extract(r.value, '$[7]'), 'pending',
       {now_ms}
FROM json_each(:rows) AS r
WHERE true
ORDER BY r.key
ON CONFLICT (key_digest) DO NOTHING
RETURNING key_digest, message_id;

-- name: record_many_lookup
-- The rows that hold the keys (a JSON array of digests) the insert did not write.
SELECT key_digest, message_id, fingerprint FROM outbox_messages
WHERE key_digest IN (SELECT value FROM json_each(:key_digests));
