-- Statements of outbox.testing: run_pending() relays and runs jobs on an application
-- test's own connection, inside its transaction, with the test's clock (:now_ms)
-- instead of the database's, so a frozen clock decides what is due. Nothing here runs
-- in production; the worker and relay keep their own statements.

-- name: testing_pending_max
-- The newest pending intent: the handoff below moves intents up to it, so an intent
-- another transaction commits in between is left for the next round, never half moved.
SELECT max(id) FROM outbox_messages WHERE state = 'pending';

-- name: testing_handoff
-- Every pending intent up to :max_id into the queue, unverified: in a test they were
-- all written by record() a moment ago.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
    coalesce(available_at, :now_ms), :now_ms, priority, trace_context, ordering_key
FROM outbox_messages
WHERE state = 'pending' AND id <= :max_id
ORDER BY id;

-- name: testing_pending_ordered
-- The intents with an ordering key that testing_handoff is about to move, in id order:
-- they enter their keys' lines first (outbox.db.ordering), as the relay's do.
SELECT message_id, ordering_key FROM outbox_messages
WHERE state = 'pending' AND id <= :max_id AND ordering_key IS NOT NULL
ORDER BY id;

-- name: testing_delete_moved
-- The handed-off intents leave the outbox; their key rows stay.
DELETE FROM outbox_messages
WHERE state = 'pending' AND id <= :max_id;

-- name: testing_due
-- The jobs due by the test's clock, in the worker's claim order.
SELECT id, message_id, queue, job_name, payload, attempts, max_attempts, created_at,
    trace_context, ordering_key
FROM outbox_jobs
WHERE reserved_by IS NULL AND available_at <= :now_ms
ORDER BY priority, available_at, id;

-- name: testing_done
DELETE FROM outbox_jobs WHERE id = :id;

-- name: testing_retry
-- A failed attempt, due again after the backoff by the test's clock.
UPDATE outbox_jobs
SET attempts = :attempts, available_at = :available_at, last_error = :error
WHERE id = :id;

-- name: testing_dead
-- First half of a dead letter (testing_done is the second), as the worker keeps it.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at, ordering_key, ordering_held)
SELECT message_id, queue, job_name, payload, :attempts, max_attempts, :exception_class,
    :exception_message, :exception_trace, priority, :now_ms, ordering_key,
    CASE WHEN ordering_key IS NULL THEN 0 ELSE :hold_key END
FROM outbox_jobs
WHERE id = :id;

-- name: testing_savepoint
-- Each job runs inside a savepoint, so a failing handler's writes roll back as they
-- would in the worker's own transaction, while the test's transaction goes on.
SAVEPOINT outbox_testing_job;

-- name: testing_rollback_job
ROLLBACK TO SAVEPOINT outbox_testing_job;

-- name: testing_release_job
RELEASE SAVEPOINT outbox_testing_job;

-- name: testing_recorded
-- What recorded()/assert_recorded() read: intents not yet handed off (pending or
-- quarantined), jobs in the queue, and dead letters.
SELECT 'intent', message_id, job_name, queue, payload, state FROM outbox_messages
WHERE state <> 'published'
UNION ALL
SELECT 'job', message_id, job_name, queue, payload,
    CASE WHEN attempts > 0 THEN 'retrying' ELSE 'queued' END
FROM outbox_jobs
UNION ALL
SELECT 'dead', message_id, job_name, queue, payload, 'dead' FROM outbox_failed_jobs;

-- name: testing_workflow_due
-- A workflow node's dependents just made due (by the database's clock) are due by the
-- test's clock, as a worker's would be at once.
UPDATE outbox_jobs SET available_at = :now_ms, created_at = :now_ms
WHERE message_id IN (SELECT e.child_id FROM outbox_workflow_edges e
                     WHERE e.parent_id = :node_id)
  AND reserved_by IS NULL AND attempts = 0;
