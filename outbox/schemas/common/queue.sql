-- name: now_ms
-- The database's clock in milliseconds: every job and intent time is compared against it.
SELECT {now_ms};

-- name: job_release
-- A failed attempt goes back to the queue after :delay_ms; compare-and-set on the holder.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL, last_error = :error,
    available_at = {now_ms} + :delay_ms
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts;

-- name: job_dead_take
-- First half of dead-lettering: remove the row while :holder still holds this attempt.
DELETE FROM outbox_jobs
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts
RETURNING message_id, queue, job_name, payload, attempts, max_attempts;

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
RETURNING message_id, queue, job_name, payload, attempts, max_attempts;
