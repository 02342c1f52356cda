-- name: queue_push
-- A job straight into the queue; available after :delay_ms by the database's clock,
-- read once so available_at - created_at is exactly the delay.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT :message_id, :queue, :job_name, :payload, 0, :max_attempts,
    clock.now_ms + :delay_ms, clock.now_ms, :priority, :trace_context, :ordering_key
FROM (SELECT {now_ms} AS now_ms) AS clock
RETURNING message_id;

-- name: queue_push_notify
-- As queue_push, plus a NOTIFY on the queue's channel, delivered on commit.
WITH ins AS (
    INSERT INTO outbox_jobs
        (message_id, queue, job_name, payload, attempts, max_attempts, available_at,
         created_at, priority, trace_context, ordering_key)
    SELECT :message_id, :queue, :job_name, :payload, 0, :max_attempts,
        clock.now_ms + :delay_ms, clock.now_ms, :priority, :trace_context, :ordering_key
    FROM (SELECT {now_ms} AS now_ms) AS clock
    RETURNING message_id
)
SELECT message_id, pg_notify('outbox_jobs', '') FROM ins;


-- name: queue_push_many
-- Up to 1,000 jobs straight into the queue in one statement, from a JSON array of rows
-- [message_id, queue, job_name, payload, max_attempts, delay_ms, priority, trace_context, ordering_key] (one
-- parameter, whatever the batch size); inserted in the given order, so ids follow it.
-- The clock is read once (a volatile subquery is not inlined): every job of the batch
-- has the same created_at, and available_at - created_at is exactly its delay.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT r.v ->> 0, r.v ->> 1, r.v ->> 2, r.v ->> 3, 0, CAST(r.v ->> 4 AS integer),
       clock.now_ms + CAST(r.v ->> 5 AS bigint), clock.now_ms, CAST(r.v ->> 6 AS smallint),
       r.v ->> 7, r.v ->> 8
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (v, ord)
CROSS JOIN (SELECT {now_ms} AS now_ms) AS clock
ORDER BY r.ord;

-- name: queue_push_many_notify
-- As queue_push_many, plus one NOTIFY on the queue's channel per statement (not per
-- row), delivered on commit.
WITH ins AS (
    INSERT INTO outbox_jobs
        (message_id, queue, job_name, payload, attempts, max_attempts, available_at,
         created_at, priority, trace_context, ordering_key)
    SELECT r.v ->> 0, r.v ->> 1, r.v ->> 2, r.v ->> 3, 0, CAST(r.v ->> 4 AS integer),
           clock.now_ms + CAST(r.v ->> 5 AS bigint), clock.now_ms,
           CAST(r.v ->> 6 AS smallint), r.v ->> 7, r.v ->> 8
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (v, ord)
    CROSS JOIN (SELECT {now_ms} AS now_ms) AS clock
    ORDER BY r.ord
    RETURNING 1
)
SELECT pg_notify('outbox_jobs', '') FROM (SELECT count(*) AS n FROM ins) AS c WHERE c.n > 0;

-- fragment: claim_clock
-- The claim's clock, read once (an InitPlan), which also sets synchronous_commit off
-- for the statement's own transaction (see queue_worker_session).
clock AS (SELECT {now_ms} AS ms, set_config('synchronous_commit', 'off', true) AS async)

-- fragment: claim_due
-- The claim's pick: due, unheld jobs of :queue, most urgent first, none while it is paused.
queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT ms FROM clock)
      AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
    ORDER BY priority, available_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED

-- fragment: claim_mark
-- What a claim writes on each job it took: holder, lease, one attempt more (FROM clock
-- follows; ordering_ack_claim adds a column before it).
SET reserved_by = :worker, reserved_at = clock.ms, lease_expires_at = clock.ms + :lease_ms,
    attempts = j.attempts + 1

-- fragment: claimed_columns
j.id, j.message_id, j.queue, j.job_name, j.payload, j.attempts, j.max_attempts,
          j.created_at, j.available_at, j.priority, j.trace_context, j.ordering_key

-- fragment: ack_fenced
-- Delete finished jobs still held by this attempt and not cancelled; asynchronous commit.
-- The ids also as an array, so the rows are found by primary key: joined only to the
-- unnest (estimated at 10 rows), the plan walked every held job's entry in
-- outbox_jobs_lease (with the dead ones a long queue leaves) and compared each with
-- each acknowledged id.
DELETE FROM outbox_jobs j
USING unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[])) AS f(id, attempts)
WHERE j.id = ANY(CAST(:ids AS bigint[])) AND j.id = f.id AND j.attempts = f.attempts
  AND j.reserved_by = :worker
  AND j.cancel_requested_at IS NULL
  AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
RETURNING j.id

-- fragment: ack_claim_rows
-- job_ack_claim's answer: the jobs claimed, then the ids acknowledged (NULL message_id).
SELECT id, message_id, queue, job_name, payload, attempts, max_attempts, created_at,
       available_at, priority, trace_context, ordering_key
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM acked

-- name: job_claim
-- Up to :limit due, unheld jobs of one queue, most urgent priority first, then oldest
-- due first, in one statement; none while the queue is paused (the NOT EXISTS is
-- uncorrelated: one primary-key probe per statement, a one-time filter).
-- SKIP LOCKED lets concurrent workers take disjoint batches; the clock is read once
-- (an InitPlan), so the comparison is an index condition on outbox_jobs_claim.
-- The picked ids are matched as an array (another InitPlan) so the UPDATE finds them by
-- primary key: joined to the CTE, a big batch (1,000) is planned as a hash join over a
-- sequential scan of the whole table (20 ms instead of 9 at 50k rows, growing with it).
-- The clock also sets synchronous_commit off for this statement's own transaction (see
-- queue_worker_session): the UPDATE joins it, so it is read before any row changes.
WITH {fragment:claim_clock},
picked AS (
    SELECT id FROM outbox_jobs
    WHERE {fragment:claim_due}
)
UPDATE outbox_jobs j
{fragment:claim_mark}
FROM clock
WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING {fragment:claimed_columns};

-- name: job_ack
-- Delete finished jobs, each only while this worker still holds that attempt and no
-- operator cancelled it (then the worker records the cancellation instead). The last
-- condition, evaluated once, commits this transaction asynchronously (queue_worker_session).
{fragment:ack_fenced};

-- name: job_heartbeat
-- Renew the leases of every job this worker holds, in one statement.
UPDATE outbox_jobs j
SET lease_expires_at = {now_ms} + :lease_ms
FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[])) AS f(id, attempts)
WHERE j.id = f.id AND j.attempts = f.attempts AND j.reserved_by = :worker;

-- name: job_release_unspent
-- Give held jobs back without spending their attempt (never started, or unknown name).
-- A zero delay keeps each job's place in the queue.
UPDATE outbox_jobs j
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempts = j.attempts - 1,
    available_at = CASE WHEN CAST(:delay_ms AS bigint) > 0
        THEN {now_ms} + :delay_ms
        ELSE j.available_at END,
    last_error = COALESCE(CAST(:error AS varchar), j.last_error)
FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[])) AS f(id, attempts)
WHERE j.id = f.id AND j.attempts = f.attempts AND j.reserved_by = :worker;

-- name: job_dead_insert
-- Second half, in the same transaction: the dead letter keeps class, message and trace.
INSERT INTO outbox_failed_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, exception_class,
     exception_message, exception_trace, priority, failed_at, ordering_key, ordering_held)
VALUES
    (:message_id, :queue, :job_name, :payload, :attempts, :max_attempts, :exception_class,
     :exception_message, :exception_trace, :priority,
     {now_ms}, :ordering_key, :ordering_held);

-- name: job_reap_scan
-- Held jobs whose lease has expired (their worker died or stalled).
SELECT id, attempts, max_attempts, reserved_by, job_name
FROM outbox_jobs
WHERE reserved_by IS NOT NULL
  AND lease_expires_at < (SELECT {now_ms})
ORDER BY lease_expires_at
LIMIT :limit;

-- name: queue_worker_session
-- Nothing, on purpose. The worker's commits need not wait for the disk: a commit lost in
-- a server crash only makes a job run again or come back through the reaper (at least
-- once holds). But a session-level SET would outlive the transaction, and behind a pooler
-- in transaction mode (PgBouncer) the server connection, setting included, goes next to
-- another client, whose business commits would then be asynchronous too. So the hot
-- statements (job_claim, job_ack, job_ack_claim) each call
-- set_config('synchronous_commit', 'off', true): local to their own transaction, which
-- PostgreSQL commits with the setting still in force. Rarer writes (release, dead letters,
-- heartbeats, the reaper, transactional handlers) commit synchronously.
SELECT 1;

-- name: job_ack_claim
-- job_ack and job_claim in one statement (one round trip on the hot path): rows with
-- a NULL message_id are the ids acknowledged, the others the jobs claimed.
-- Both halves commit asynchronously, as in job_ack and job_claim.
WITH acked AS ({fragment:ack_fenced}),
{fragment:claim_clock},
picked AS (
    SELECT id FROM outbox_jobs
    WHERE {fragment:claim_due}
),
claimed AS (
    UPDATE outbox_jobs j
    {fragment:claim_mark}
    FROM clock
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING {fragment:claimed_columns}
)
{fragment:ack_claim_rows};

-- name: job_cancel_requested
-- Which of the jobs this worker holds an operator has cancelled (read with heartbeats).
SELECT id FROM outbox_jobs
WHERE id = ANY (CAST(:ids AS bigint[])) AND reserved_by = :worker
  AND cancel_requested_at IS NOT NULL;

-- name: queue_pause
-- Pause a queue (idempotent): the claim takes nothing from a queue listed here. Also
-- wakes idle workers at commit, so that a resume takes effect at once (see queue_resume).
INSERT INTO outbox_paused_queues (queue, paused_at)
VALUES (:queue, {now_ms})
ON CONFLICT (queue) DO NOTHING;
