-- Encryption key rotation and status (outbox/db/keys.py); the updates are in
-- common/keys.sql. Each batch locks its rows FOR UPDATE SKIP LOCKED: a row a worker,
-- the relay or a producer holds is passed over, not waited for (a later run picks it
-- up). An envelope starts {"$sealed":"v1:KEY_ID: (outbox/sealing.py).

-- fragment: sealed_key_id
-- The key id of the row's payload envelope; NULL for plaintext.
CASE WHEN payload LIKE '{"$sealed":"v1:%' THEN split_part(payload, ':', 3) END

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
FOR UPDATE SKIP LOCKED;

-- name: keys_batch_jobs
SELECT id, payload FROM outbox_jobs
WHERE id > :after AND payload NOT LIKE :current ESCAPE '!'
ORDER BY id LIMIT :batch
FOR UPDATE SKIP LOCKED;

-- name: keys_batch_dead
SELECT id, payload, exception_message, exception_trace FROM outbox_failed_jobs
WHERE id > :after AND (payload NOT LIKE :current ESCAPE '!'
    OR exception_message NOT LIKE :current ESCAPE '!'
    OR exception_trace NOT LIKE :current ESCAPE '!')
ORDER BY id LIMIT :batch
FOR UPDATE SKIP LOCKED;

-- name: keys_batch_results
SELECT message_id, payload, return_value, exception_trace FROM outbox_job_results
WHERE message_id > :after_id AND (payload NOT LIKE :current ESCAPE '!'
    OR return_value NOT LIKE :current ESCAPE '!'
    OR exception_trace NOT LIKE :current ESCAPE '!')
ORDER BY message_id LIMIT :batch
FOR UPDATE SKIP LOCKED;

-- name: keys_batch_nodes
SELECT node_id, payload FROM outbox_workflow_nodes
WHERE node_id > :after_id AND payload NOT LIKE :current ESCAPE '!'
ORDER BY node_id LIMIT :batch
FOR UPDATE SKIP LOCKED;
