-- fragment: intent_reason
-- Why a stored intent fails verification, or NULL when it verifies. The reason codes
-- and their order match outbox.relay.verify.reason_for. The fingerprint is compared
-- byte for byte: the column's collation ignores case.
CASE
    WHEN payload IS NULL OR NOT JSON_VALID(payload) THEN 'invalid_json'
    WHEN CHAR_LENGTH(job_name) NOT BETWEEN 1 AND {max_name_chars}
        OR job_name REGEXP '[^A-Za-z0-9_.:-]' THEN 'invalid_name'
    WHEN CHAR_LENGTH(queue) NOT BETWEEN 1 AND {max_name_chars}
        OR queue REGEXP '[^A-Za-z0-9_.:-]' THEN 'invalid_queue'
    WHEN max_attempts NOT BETWEEN 1 AND {max_attempts_limit} THEN 'invalid_max_attempts'
    WHEN available_at < 0 THEN 'invalid_available_at'
    WHEN LENGTH(payload) > {max_payload_bytes} THEN 'payload_too_large'
    WHEN fingerprint IS NULL OR CAST(fingerprint AS BINARY) <> CAST(SHA2(CONCAT(
            IF(ordering_key IS NOT NULL, '{fingerprint_version_ordered}',
                IF(priority = 0, '{fingerprint_version_default_priority}', '{fingerprint_version}')),
            CHAR(10 USING utf8mb4), job_name, CHAR(10 USING utf8mb4), queue,
            CHAR(10 USING utf8mb4), COALESCE(CAST(max_attempts AS CHAR), ''),
            CHAR(10 USING utf8mb4), COALESCE(CAST(available_at AS CHAR), ''),
            CHAR(10 USING utf8mb4),
            IF(priority = 0 AND ordering_key IS NULL, '',
                CONCAT(CAST(priority AS CHAR), CHAR(10 USING utf8mb4))),
            IF(ordering_key IS NULL, '', CONCAT(ordering_key, CHAR(10 USING utf8mb4))),
            payload), 256) AS BINARY)
        THEN 'fingerprint_mismatch'
END;

-- name: relay_claim
-- Lock the oldest pending rows and verify each in SQL; the reason is NULL for a valid
-- row. The reason codes and their order match outbox.relay.verify.reason_for.
SELECT id, message_id,
    {fragment:intent_reason} AS reason, trace_context, ordering_key
FROM outbox_messages
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size
FOR UPDATE SKIP LOCKED;

-- name: relay_claim_checked
-- A broker target's claim: the oldest pending rows, locked, with every column the
-- message needs and the reason each fails verification (NULL: valid). The payload
-- leaves the database only for the broker.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, ordering_key, {fragment:intent_reason} AS reason, trace_context
FROM outbox_messages
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size
FOR UPDATE SKIP LOCKED;

-- name: relay_claim_rows
-- The Python verifier's claim: the oldest pending rows, locked, with every column the
-- fingerprint covers.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, trace_context, ordering_key
FROM outbox_messages
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size
FOR UPDATE SKIP LOCKED;

-- name: relay_insert_jobs
-- The verified rows of a batch into the queue, in id order, in one statement.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
    COALESCE(available_at, clock.now_ms), clock.now_ms, priority, trace_context, ordering_key
FROM outbox_messages,
    (SELECT {now_ms} AS now_ms) AS clock
WHERE id IN :ids AND state = 'pending'
ORDER BY id;

-- name: relay_delete_moved
-- The handed-off rows leave the outbox (their key rows stay in outbox_keys). The rows
-- were selected FOR UPDATE by relay_claim: select-then-delete under the row locks,
-- since MySQL 8 has no DELETE ... RETURNING. By the primary key, forced: on a small
-- outbox the optimizer scans the whole table, and a DELETE waits for every row it scans
-- (no semi-consistent read as an UPDATE has), so it would wait for the rows another
-- relay lane holds for its own batch. Only the multi-table form takes an index hint.
DELETE m FROM outbox_messages AS m FORCE INDEX (PRIMARY)
WHERE m.id IN :ids AND m.state = 'pending';

-- name: relay_mark_failed
UPDATE outbox_messages
SET state = 'failed', failure_reason = :reason,
    failed_at = {now_ms}
WHERE id IN :ids AND state = 'pending';
