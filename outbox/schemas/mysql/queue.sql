-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at)
VALUES
    (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
     CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + :delay_ms,
     CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
