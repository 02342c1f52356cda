-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at)
VALUES
    (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
     (extract(epoch FROM clock_timestamp()) * 1000)::bigint + :delay_ms,
     (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
RETURNING message_id;

-- name: queue_push_notify
-- As queue_push, plus a NOTIFY on the queue's channel, delivered on commit.
WITH ins AS (
    INSERT INTO outbox_jobs
        (message_id, queue, job_name, payload, attempts, max_attempts, available_at,
         created_at)
    VALUES
        (:message_id, :queue, :job_name, :payload, 0, :max_attempts,
         (extract(epoch FROM clock_timestamp()) * 1000)::bigint + :delay_ms,
         (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    RETURNING message_id
)
SELECT message_id, pg_notify('outbox_jobs', '') FROM ins;
