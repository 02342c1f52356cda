-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at)
VALUES
    (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
     CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + :delay_ms,
     CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
RETURNING message_id;
