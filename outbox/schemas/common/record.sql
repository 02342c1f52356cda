-- name: record_insert_own_intent
-- The intent of a key row that record_insert_returning just wrote and returned as its
-- own (MariaDB 10.5+, SQLite): plain VALUES, not read back from the key row, which cost
-- MariaDB 7% of a producer transaction (record_insert_intent's INSERT ... SELECT).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
VALUES (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload,
    :max_attempts, :available_at, 'pending', {now_ms}, 1, :priority, :trace_context, :ordering_key);

-- name: record_insert_intent
-- The intent, only if the key row just written (record_insert) is its own: MySQL 8,
-- whose insert returns no row to say so. Dialects that can insert in a WITH clause write
-- both in record_insert instead.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
SELECT k.message_id, k.key_digest, k.fingerprint, :job_name, :queue, :payload,
    :max_attempts, :available_at, 'pending', k.created_at, 1, :priority, :trace_context, :ordering_key
FROM outbox_keys AS k
WHERE k.key_digest = :key_digest AND k.message_id = :message_id;
