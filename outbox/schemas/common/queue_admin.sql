-- name: queue_admin_failed
-- Dead letters, newest first: ids, names, attempts, exception class and time only.
SELECT message_id, queue, job_name, attempts, exception_class, failed_at
FROM outbox_failed_jobs
ORDER BY id DESC
LIMIT :limit;

-- name: queue_admin_failed_show
-- One dead letter in full, for an operator who asks (message and traceback included;
-- the payload only to say its size and key id, never shown).
SELECT message_id, queue, job_name, attempts, max_attempts, exception_class,
       exception_message, exception_trace, failed_at, payload
FROM outbox_failed_jobs
WHERE message_id = :message_id;

-- name: queue_admin_failed_ids
-- The next dead letters to retry, oldest first. A skipped workflow node is not one of
-- them: it comes back with the failed node it waits for, or never (a cancelled
-- workflow's), and left in the list it would fill every batch of `retry --all`.
SELECT f.message_id FROM outbox_failed_jobs f
WHERE NOT EXISTS (
    SELECT 1 FROM outbox_workflow_nodes n WHERE n.node_id = f.message_id AND n.state = 'skipped')
ORDER BY f.id LIMIT :limit;

-- name: queue_admin_remove
-- Remove one job from the queue (a worker holding it then loses its lease).
DELETE FROM outbox_jobs WHERE message_id = :message_id;

-- name: queue_job_count
-- Jobs of one queue in the table, held or not (the demo waits for its queue to empty).
SELECT count(*) FROM outbox_jobs WHERE queue = :queue;

-- name: queue_admin_job_key
-- The ordering key of the job queue_admin_remove is about to remove (its turn passes on).
SELECT ordering_key FROM outbox_jobs WHERE message_id = :message_id AND ordering_key IS NOT NULL;
