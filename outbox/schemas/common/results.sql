-- Job results (outbox.results): written with the acknowledgement or the dead-lettering of
-- a job whose handler keeps its result, in that same transaction.

-- name: result_delete
-- A job run again after a dead letter was retried: its old outcome goes first.
DELETE FROM outbox_job_results WHERE message_id = :message_id;

-- name: result_insert
-- The outcome, timed by the database's clock: finished now, started :ran_ms ago, kept
-- for :keep_ms. Class and trace of an error, never its message nor the payload's parts.
INSERT INTO outbox_job_results
    (message_id, queue, job_name, status, payload, return_value, attempts, enqueued_at,
     started_at, finished_at, worker_id, exception_class, exception_trace, expires_at)
VALUES
    (:message_id, :queue, :job_name, :status, :payload, :return_value, :attempts,
     :enqueued_at, {now_ms} - :ran_ms, {now_ms}, :worker_id, :exception_class,
     :exception_trace, {now_ms} + :keep_ms);

-- name: result_get
-- One job's kept outcome.
SELECT message_id, queue, job_name, status, payload, return_value, attempts, enqueued_at,
       started_at, finished_at, worker_id, exception_class, exception_trace
FROM outbox_job_results WHERE message_id = :message_id;

-- name: result_job_state
-- A job not finished yet, as the queue holds it: held (running) or waiting; or, not yet
-- handed off, as a pending intent (record() enqueues into the outbox, not the queue).
-- The relay moves a row from one table to the other in one transaction: one is found.
SELECT message_id, queue, job_name, payload, attempts, created_at, reserved_at, reserved_by
FROM outbox_jobs WHERE message_id = :message_id
UNION ALL
SELECT message_id, queue, job_name, payload, 0, created_at, NULL, NULL
FROM outbox_messages WHERE message_id = :message_id AND state = 'pending';
