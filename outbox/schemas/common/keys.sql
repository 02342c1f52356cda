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

-- name: keys_status
-- Rows per table and key id (NULL: plaintext). A full scan of each table: an operator's
-- question, asked now and then, never on a hot path.
SELECT 'outbox_messages', {fragment:sealed_key_id}, count(*) FROM outbox_messages
WHERE payload IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'outbox_jobs', {fragment:sealed_key_id}, count(*) FROM outbox_jobs GROUP BY 2
UNION ALL
SELECT 'outbox_failed_jobs', {fragment:sealed_key_id}, count(*) FROM outbox_failed_jobs
GROUP BY 2
UNION ALL
SELECT 'outbox_job_results', {fragment:sealed_key_id}, count(*) FROM outbox_job_results
GROUP BY 2
UNION ALL
SELECT 'outbox_workflow_nodes', {fragment:sealed_key_id}, count(*) FROM outbox_workflow_nodes
GROUP BY 2;

-- name: keys_batch_intents
-- The next pending intents after :after whose payload is not under the current key
-- (:current, a LIKE pattern escaped with !), by primary key: a batch is resumable from
-- its last id, and rows done drop out of the filter. Quarantined intents are left alone.
SELECT id, message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
    available_at, priority, ordering_key
FROM outbox_messages
WHERE id > :after AND state = 'pending' AND payload IS NOT NULL
  AND payload NOT LIKE :current ESCAPE '!'
ORDER BY id LIMIT :batch
{fragment:keys_lock};

-- name: keys_batch_jobs
SELECT id, payload FROM outbox_jobs
WHERE id > :after AND payload NOT LIKE :current ESCAPE '!'
ORDER BY id LIMIT :batch
{fragment:keys_lock};

-- name: keys_batch_dead
SELECT id, payload, exception_message, exception_trace FROM outbox_failed_jobs
WHERE id > :after AND (payload NOT LIKE :current ESCAPE '!'
    OR exception_message NOT LIKE :current ESCAPE '!'
    OR exception_trace NOT LIKE :current ESCAPE '!')
ORDER BY id LIMIT :batch
{fragment:keys_lock};

-- name: keys_batch_results
SELECT message_id, payload, return_value, exception_trace FROM outbox_job_results
WHERE message_id > :after_id AND (payload NOT LIKE :current ESCAPE '!'
    OR return_value NOT LIKE :current ESCAPE '!'
    OR exception_trace NOT LIKE :current ESCAPE '!')
ORDER BY message_id LIMIT :batch
{fragment:keys_lock};

-- name: keys_batch_nodes
SELECT node_id, payload FROM outbox_workflow_nodes
WHERE node_id > :after_id AND payload NOT LIKE :current ESCAPE '!'
ORDER BY node_id LIMIT :batch
{fragment:keys_lock};
