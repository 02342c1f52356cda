-- name: now_ms
-- The database's clock in milliseconds: every job and intent time is compared against it.
SELECT {now_ms};

-- name: job_release
-- A failed attempt goes back to the queue after :delay_ms; compare-and-set on the holder.
-- Not a job an operator cancelled meanwhile: its worker records the cancellation instead.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL, last_error = :error,
    available_at = {now_ms} + :delay_ms
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
  AND cancel_requested_at IS NULL;

-- name: job_snooze
-- outbox.Snooze: back to the queue after :delay_ms with the attempt given back, while
-- held by this attempt, not cancelled, and under the cap on snoozes.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempts = attempts - 1, snoozes = snoozes + 1,
    available_at = {now_ms} + :delay_ms
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
  AND cancel_requested_at IS NULL AND snoozes < :max_snoozes;

-- name: job_held_state
-- Why a compare-and-set on a held job changed nothing: no row (the lease was lost),
-- a cancellation, or the snooze cap.
SELECT cancel_requested_at, snoozes FROM outbox_jobs
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts;

-- name: job_cancel_take
-- `outbox queue cancel` on a job no worker holds: out of the queue, to the dead letters.
DELETE FROM outbox_jobs
WHERE message_id = :message_id AND reserved_by IS NULL
RETURNING message_id, queue, job_name, payload, attempts, max_attempts, priority, ordering_key;

-- name: job_cancel_flag
-- `outbox queue cancel` on a held job: flag it; its worker learns at the next heartbeat
-- and records the cancellation when the handler returns.
UPDATE outbox_jobs SET cancel_requested_at = {now_ms}
WHERE message_id = :message_id AND reserved_by IS NOT NULL;

-- name: queue_resume
-- Resume a queue: workers claim from it again.
DELETE FROM outbox_paused_queues WHERE queue = :queue;

-- name: queue_paused_list
-- Every paused queue, by name.
SELECT queue, paused_at FROM outbox_paused_queues ORDER BY queue;

-- name: job_dead_take
-- First half of dead-lettering: remove the row while :holder still holds this attempt.
DELETE FROM outbox_jobs
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
RETURNING message_id, queue, job_name, payload, attempts, max_attempts, priority, ordering_key;

-- name: job_reap_release
-- Back to the queue, only if the lease is still expired and held by the same attempt:
-- a job acknowledged or renewed since the scan is left alone.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL, last_error = :error,
    available_at = {now_ms}
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
  AND lease_expires_at < {now_ms};

-- name: job_reap_take
-- Dead-letter an expired job at its attempt limit: as job_dead_take, lease still expired.
DELETE FROM outbox_jobs
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
  AND lease_expires_at < {now_ms}
RETURNING message_id, queue, job_name, payload, attempts, max_attempts, priority, ordering_key;
