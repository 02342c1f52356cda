-- fragment: intent_reason
-- Why a stored intent fails verification, or NULL when it verifies. The reason codes
-- and their order match outbox.relay.verify.reason_for. typeof() guards come first
-- because SQLite columns accept any type.
CASE
    WHEN typeof(payload) <> 'text' OR NOT json_valid(payload) THEN 'invalid_json'
    WHEN typeof(job_name) <> 'text' OR length(job_name) NOT BETWEEN 1 AND {max_name_chars}
        OR job_name REGEXP '[^A-Za-z0-9_.:-]' THEN 'invalid_name'
    WHEN typeof(queue) <> 'text' OR length(queue) NOT BETWEEN 1 AND {max_name_chars}
        OR queue REGEXP '[^A-Za-z0-9_.:-]' THEN 'invalid_queue'
    WHEN typeof(max_attempts) NOT IN ('integer', 'null')
        OR max_attempts NOT BETWEEN 1 AND {max_attempts_limit} THEN 'invalid_max_attempts'
    WHEN typeof(available_at) NOT IN ('integer', 'null')
        OR available_at < 0 THEN 'invalid_available_at'
    WHEN length(CAST(payload AS BLOB)) > {max_payload_bytes} THEN 'payload_too_large'
    WHEN typeof(fingerprint) <> 'text' OR outbox_sha256(
            CASE WHEN ordering_key IS NOT NULL THEN '{fingerprint_version_ordered}'
                WHEN priority = 0 THEN '{fingerprint_version_default_priority}'
                ELSE '{fingerprint_version}' END
            || char(10) || job_name || char(10) || queue || char(10)
            || coalesce(CAST(max_attempts AS TEXT), '') || char(10)
            || coalesce(CAST(available_at AS TEXT), '') || char(10)
            || CASE WHEN priority = 0 AND ordering_key IS NULL THEN ''
                ELSE CAST(priority AS TEXT) || char(10) END
            || CASE WHEN ordering_key IS NULL THEN '' ELSE ordering_key || char(10) END
            || payload)
        <> fingerprint THEN 'fingerprint_mismatch'
END;

-- name: relay_claim
-- The oldest pending rows, verified in SQL; the reason is NULL for a valid row. No row
-- locks: the relay's BEGIN IMMEDIATE holds SQLite's single writer lock for the batch.
-- INDEXED BY: with a backlog, SQLite's planner prefers walking the table in rowid order
-- and skipping what is not pending; quarantined rows collect at the low ids, so that walk
-- grows with them. The partial index holds pending rows only.
SELECT id, message_id,
    {fragment:intent_reason} AS reason, trace_context, ordering_key
FROM outbox_messages INDEXED BY outbox_messages_pending
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size;

-- name: relay_claim_checked
-- A broker target's claim: the oldest pending rows, locked, with every column the
-- message needs and the reason each fails verification (NULL: valid). The payload
-- leaves the database only for the broker.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, ordering_key, {fragment:intent_reason} AS reason, trace_context
FROM outbox_messages INDEXED BY outbox_messages_pending
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size;

-- name: relay_claim_rows
-- The Python verifier's claim: the oldest pending rows with every column the
-- fingerprint covers.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, trace_context, ordering_key
FROM outbox_messages INDEXED BY outbox_messages_pending
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size;

-- name: relay_insert_jobs
-- The verified rows of a batch into the queue, in id order, in one statement.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
    coalesce(available_at, clock.now_ms), clock.now_ms, priority, trace_context, ordering_key
FROM outbox_messages,
    (SELECT {now_ms} AS now_ms) AS clock
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
ORDER BY id;

-- name: relay_delete_moved
-- The handed-off rows leave the outbox (their key rows stay in outbox_keys).
DELETE FROM outbox_messages
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending';

-- name: relay_mark_failed
UPDATE outbox_messages
SET state = 'failed', failure_reason = :reason,
    failed_at = {now_ms}
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending';
