-- name: queue_admin_jobs
-- The queue's jobs, oldest first: ids, names, times, the last error's class. No payloads.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_by,
       lease_expires_at, created_at, last_error, priority
FROM outbox_jobs
WHERE (:queue IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit;

-- name: queue_admin_requeue
-- Dead letters back into the queue, due now, attempts reset to 0.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts, {now_ms}, {now_ms}, priority,
    ordering_key
FROM outbox_failed_jobs
WHERE message_id IN (SELECT value FROM json_each(:ids));

-- name: queue_admin_failed_delete
-- Remove dead letters by message id (after a requeue, or to forget them).
DELETE FROM outbox_failed_jobs WHERE message_id IN (SELECT value FROM json_each(:ids));

-- name: queue_admin_clear
-- Remove every job no worker holds, of one queue or all.
DELETE FROM outbox_jobs WHERE reserved_by IS NULL AND (:queue IS NULL OR queue = :queue);

-- name: queue_admin_failed_ordered
-- The dead letters about to be requeued that have an ordering key, oldest first: they
-- enter their keys' lines (outbox.db.ordering) behind the jobs already there.
SELECT message_id, ordering_key, ordering_held FROM outbox_failed_jobs
WHERE message_id IN (SELECT value FROM json_each(:ids)) AND ordering_key IS NOT NULL
ORDER BY id;

-- name: queue_admin_clear_keys
-- The ordering keys of the jobs queue_admin_clear is about to remove: their turns pass on.
SELECT DISTINCT ordering_key FROM outbox_jobs
WHERE reserved_by IS NULL AND (:queue IS NULL OR queue = :queue) AND ordering_key IS NOT NULL;

-- name: queue_admin_clear_nodes
-- The workflow nodes among the jobs queue_admin_clear is about to remove: each ends as
-- failed, in the same transaction, so its workflow does not wait for it for ever.
SELECT n.node_id FROM outbox_workflow_nodes n
JOIN outbox_jobs j ON j.message_id = n.node_id
WHERE n.state = 'due' AND j.reserved_by IS NULL AND (:queue IS NULL OR j.queue = :queue);
