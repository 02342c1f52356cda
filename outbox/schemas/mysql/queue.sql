-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
VALUES
    (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
     {now_ms} + :delay_ms,
     {now_ms}, :priority, :trace_context, :ordering_key);


-- name: queue_push_many
-- Up to 1,000 jobs straight into the queue in one statement, from a JSON array of rows
-- [message_id, queue, job_name, payload, max_attempts, delay_ms, priority, trace_context, ordering_key] (one
-- parameter, whatever the batch size); inserted in the given order, so ids follow it.
-- The clock (NOW(3)) is fixed for the statement.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT r.message_id, r.queue, r.job_name, r.payload, 0, r.max_attempts,
       {now_ms} + r.delay_ms, {now_ms}, r.priority, r.trace_context, r.ordering_key
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    ord FOR ORDINALITY,
    message_id VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    job_name VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
    max_attempts INT PATH '$[4]',
    delay_ms BIGINT PATH '$[5]',
    priority SMALLINT PATH '$[6]',
    trace_context VARCHAR(600) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[7]',
    ordering_key VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[8]'
)) AS r
ORDER BY r.ord;

-- name: job_claim_pick
-- MariaDB has no UPDATE ... RETURNING: first lock up to :limit due, unheld jobs of one
-- queue (READ COMMITTED, SKIP LOCKED: no gap locks, disjoint batches), with the clock,
-- most urgent priority first; none while the queue is paused.
SELECT id, message_id, queue, job_name, payload, attempts, max_attempts, created_at,
       available_at, priority, trace_context, ordering_key, {now_ms} AS now_ms
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NULL
  AND available_at <= {now_ms}
  AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
ORDER BY priority, available_at, id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: job_claim_mark
-- ... then mark them held, by primary key, in the same transaction.
UPDATE outbox_jobs
SET reserved_by = :worker, reserved_at = :now_ms, lease_expires_at = :now_ms + :lease_ms,
    attempts = attempts + 1
WHERE id IN :ids;

-- name: job_ack
-- Delete finished jobs, each only while this worker still holds that attempt and no
-- operator cancelled it (then the worker records the cancellation instead).
DELETE FROM outbox_jobs
WHERE id IN :ids AND (id, attempts) IN :pairs AND reserved_by = :worker
  AND cancel_requested_at IS NULL
RETURNING id;

-- name: job_heartbeat
-- Renew the leases of every job this worker holds, in one statement. MariaDB counts only
-- rows it changed, and a heartbeat in the claim's own millisecond would set the same
-- lease: it moves at least one millisecond on, so each held job counts.
UPDATE outbox_jobs
SET lease_expires_at = GREATEST({now_ms} + :lease_ms, COALESCE(lease_expires_at, 0) + 1)
WHERE id IN :ids AND (id, attempts) IN :pairs AND reserved_by = :worker;

-- name: job_release_unspent
-- Give held jobs back without spending their attempt (never started, or unknown name).
-- A zero delay keeps each job's place in the queue.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempts = attempts - 1,
    available_at = CASE WHEN :delay_ms > 0
        THEN {now_ms} + :delay_ms
        ELSE available_at END,
    last_error = COALESCE(:error, last_error)
WHERE id IN :ids AND (id, attempts) IN :pairs AND reserved_by = :worker;

-- name: job_dead_insert
-- Second half, in the same transaction: the dead letter keeps class, message and trace.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at, ordering_key, ordering_held)
VALUES
    (:message_id, :queue, :job_name, :payload, :attempts, :max_attempts, :exception_class,
     :exception_message, :exception_trace, :priority, {now_ms}, :ordering_key, :ordering_held);

-- name: job_reap_scan
-- Held jobs whose lease has expired (their worker died or stalled).
SELECT id, attempts, max_attempts, reserved_by, job_name
FROM outbox_jobs
WHERE reserved_by IS NOT NULL
  AND lease_expires_at < {now_ms}
ORDER BY lease_expires_at
LIMIT :limit;

-- name: queue_worker_session
-- The worker's own connection need not wait for each commit to reach disk: a commit
-- lost in a server crash only makes a job run again or come back through the reaper
-- (at least once holds); no producer's commit depends on it.
SELECT 1;

-- name: job_cancel_requested
-- Which of the jobs this worker holds an operator has cancelled (read with heartbeats).
SELECT id FROM outbox_jobs
WHERE id IN :ids AND reserved_by = :worker AND cancel_requested_at IS NOT NULL;

-- name: queue_pause
-- Pause a queue (idempotent): the claim takes nothing from a queue listed here. IGNORE,
-- not ON DUPLICATE KEY UPDATE, which would need the UPDATE privilege (the operator's
-- role has INSERT and DELETE here); the queue name is checked before it is sent.
INSERT IGNORE INTO outbox_paused_queues (queue, paused_at)
VALUES (:queue, {now_ms});
