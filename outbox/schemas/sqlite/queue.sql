-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
VALUES
    (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
     {now_ms} + :delay_ms,
     {now_ms}, :priority, :trace_context, :ordering_key)
RETURNING message_id;


-- name: queue_push_many
-- Up to 1,000 jobs straight into the queue in one statement, from a JSON array of rows
-- [message_id, queue, job_name, payload, max_attempts, delay_ms, priority, trace_context, ordering_key] (one
-- parameter, whatever the batch size); inserted in the given order, so ids follow it.
-- 'now' is fixed for the statement.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT json_extract(r.value, '$[0]'), json_extract(r.value, '$[1]'),
       json_extract(r.value, '$[2]'), json_extract(r.value, '$[3]'), 0,
       json_extract(r.value, '$[4]'), {now_ms} + json_extract(r.value, '$[5]'), {now_ms},
       json_extract(r.value, '$[6]'), json_extract(r.value, '$[7]'),
       json_extract(r.value, '$[8]')
FROM json_each(:rows) AS r
ORDER BY r.key;

-- name: job_claim
-- Up to :limit due, unheld jobs of one queue, most urgent priority first, then oldest
-- due first, in one statement run inside BEGIN IMMEDIATE (SQLite has one writer; 'now'
-- is fixed for the statement); none while the queue is paused.
UPDATE outbox_jobs
SET reserved_by = :worker,
    reserved_at = {now_ms},
    lease_expires_at = {now_ms} + :lease_ms,
    attempts = attempts + 1
WHERE id IN (
    SELECT id FROM outbox_jobs
    WHERE queue = :queue AND reserved_by IS NULL
      AND available_at <= {now_ms}
      AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
    ORDER BY priority, available_at, id
    LIMIT :limit
)
RETURNING id, message_id, queue, job_name, payload, attempts, max_attempts, created_at,
          available_at, priority, trace_context, ordering_key;

-- name: job_ack
-- Delete finished jobs, each only while this worker still holds that attempt and no
-- operator cancelled it (then the worker records the cancellation instead).
-- :pairs is a JSON array of [id, attempts].
DELETE FROM outbox_jobs
WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:pairs))
  AND reserved_by = :worker AND cancel_requested_at IS NULL
  AND (id, attempts) IN (
      SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs))
RETURNING id;

-- name: job_heartbeat
-- Renew the leases of every job this worker holds, in one statement.
UPDATE outbox_jobs
SET lease_expires_at = {now_ms} + :lease_ms
WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:pairs))
  AND reserved_by = :worker
  AND (id, attempts) IN (
      SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs));

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
WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:pairs))
  AND reserved_by = :worker
  AND (id, attempts) IN (
      SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs));

-- name: job_dead_insert
-- Second half, in the same transaction: the dead letter keeps class, message and trace.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at, ordering_key, ordering_held)
VALUES
    (:message_id, :queue, :job_name, :payload, :attempts, :max_attempts, :exception_class,
     :exception_message, :exception_trace, :priority,
     {now_ms}, :ordering_key, :ordering_held);

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
PRAGMA synchronous = NORMAL;

-- name: job_cancel_requested
-- Which of the jobs this worker holds an operator has cancelled (read with heartbeats).
SELECT id FROM outbox_jobs
WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(:pairs))
  AND reserved_by = :worker AND cancel_requested_at IS NOT NULL;

-- name: queue_pause
-- Pause a queue (idempotent): the claim takes nothing from a queue listed here.
INSERT INTO outbox_paused_queues (queue, paused_at)
VALUES (:queue, {now_ms})
ON CONFLICT (queue) DO NOTHING;
