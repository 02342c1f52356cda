-- name: queue_admin_jobs
-- The queue's jobs, oldest first: ids, names, times, the last error's class. No payloads.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_by,
       lease_expires_at, created_at, last_error
FROM outbox_jobs
WHERE (:queue IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit;

-- name: queue_admin_stats
-- Per queue: ready (due, unheld), delayed (not yet due), reserved (held by a worker).
SELECT queue,
       SUM(CASE WHEN reserved_by IS NULL AND available_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) THEN 1 ELSE 0 END),
       SUM(CASE WHEN reserved_by IS NULL AND available_at > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) THEN 1 ELSE 0 END),
       SUM(CASE WHEN reserved_by IS NOT NULL THEN 1 ELSE 0 END),
       MIN(CASE WHEN reserved_by IS NULL AND available_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) THEN available_at END)
FROM outbox_jobs
GROUP BY queue;

-- name: queue_admin_dead_counts
-- Dead letters per queue.
SELECT queue, COUNT(*) FROM outbox_failed_jobs GROUP BY queue;

-- name: queue_admin_now
-- The database's clock, for ages in listings.
SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER);

-- name: queue_admin_failed
-- Dead letters, newest first: ids, names, attempts, exception class and time only.
SELECT message_id, queue, job_name, attempts, exception_class, failed_at
FROM outbox_failed_jobs
ORDER BY id DESC
LIMIT :limit;

-- name: queue_admin_failed_show
-- One dead letter in full, for an operator who asks (message and traceback included).
SELECT message_id, queue, job_name, attempts, max_attempts, exception_class,
       exception_message, exception_trace, failed_at
FROM outbox_failed_jobs
WHERE message_id = :message_id;

-- name: queue_admin_failed_ids
-- The next dead letters to retry, oldest first.
SELECT message_id FROM outbox_failed_jobs ORDER BY id LIMIT :limit;

-- name: queue_admin_requeue
-- Dead letters back into the queue, due now, attempts reset to 0.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at)
SELECT message_id, queue, job_name, payload, 0, max_attempts, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
FROM outbox_failed_jobs
WHERE message_id IN (SELECT value FROM json_each(:ids));

-- name: queue_admin_failed_delete
-- Remove dead letters by message id (after a requeue, or to forget them).
DELETE FROM outbox_failed_jobs WHERE message_id IN (SELECT value FROM json_each(:ids));

-- name: queue_admin_remove
-- Remove one job from the queue (a worker holding it then loses its lease).
DELETE FROM outbox_jobs WHERE message_id = :message_id;

-- name: queue_admin_clear
-- Remove every job no worker holds, of one queue or all.
DELETE FROM outbox_jobs WHERE reserved_by IS NULL AND (:queue IS NULL OR queue = :queue);
