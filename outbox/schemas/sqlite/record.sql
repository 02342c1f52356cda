-- name: record_insert_returning
-- The key row first: no row back when the key already exists (then record_lookup
-- decides). The intent follows (record_insert_intent) in the same transaction.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
ON CONFLICT (key_digest) DO NOTHING
RETURNING message_id, fingerprint;

-- name: record_lookup
SELECT message_id, fingerprint FROM outbox_keys WHERE key_digest = :key_digest;

-- name: record_many_insert_returning
-- Up to 1,000 key rows in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at, priority, trace_context, ordering_key]. "WHERE true" keeps ON CONFLICT from parsing as a join constraint.
-- Rows whose key already exists come back missing.
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT json_extract(r.value, '$[1]'), json_extract(r.value, '$[0]'),
       json_extract(r.value, '$[2]'), {now_ms}
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT (key_digest) DO NOTHING
RETURNING key_digest, message_id, fingerprint;

-- name: record_many_insert_intents
-- The intents of the batch whose key rows are their own, in the given order.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
SELECT k.message_id, k.key_digest, k.fingerprint,
       json_extract(r.value, '$[3]'), json_extract(r.value, '$[4]'),
       json_extract(r.value, '$[5]'), json_extract(r.value, '$[6]'),
       json_extract(r.value, '$[7]'), 'pending', k.created_at, 1,
       json_extract(r.value, '$[8]'), json_extract(r.value, '$[9]'),
       json_extract(r.value, '$[10]')
FROM json_each(:rows) AS r
JOIN outbox_keys AS k
    ON k.key_digest = json_extract(r.value, '$[1]')
    AND k.message_id = json_extract(r.value, '$[0]')
ORDER BY r.key;

-- name: record_many_lookup
-- The key rows (a JSON array of digests) the insert did not write.
SELECT key_digest, message_id, fingerprint FROM outbox_keys
WHERE key_digest IN (SELECT value FROM json_each(:key_digests));
