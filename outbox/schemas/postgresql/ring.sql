-- The ring storage's own statements (outbox.db.ring; docs/explanation/queue-storage.md).
-- Every other statement reads and writes outbox_jobs as it does the heap: the
-- partitioned parent takes them unchanged. Only the claim differs: it reads the current
-- slot alone (outbox_ring_slot() is STABLE, so PostgreSQL prunes the other partitions
-- at executor start-up and never walks their dead index entries).

-- name: ring_installed
-- Is outbox_jobs the ring's partitioned parent?
SELECT to_regclass('outbox_queue_ring') IS NOT NULL;

-- name: ring_job_claim
-- job_claim (queue.sql, which says why each part is there) on the current slot only.
WITH clock AS (SELECT {now_ms} AS ms, set_config('synchronous_commit', 'off', true) AS async),
picked AS (
    SELECT id FROM outbox_jobs
    WHERE slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
      AND queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT ms FROM clock)
      AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
    ORDER BY priority, available_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_jobs j
SET reserved_by = :worker, reserved_at = clock.ms, lease_expires_at = clock.ms + :lease_ms,
    attempts = j.attempts + 1
FROM clock
WHERE j.slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1) AND j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING j.id, j.message_id, j.queue, j.job_name, j.payload, j.attempts, j.max_attempts,
          j.created_at, j.available_at, j.priority, j.trace_context, j.ordering_key;

-- name: ring_job_ack_claim
-- job_ack_claim (queue.sql) with ring_job_claim's claim: the acknowledgement finds its
-- rows in whichever slot they are.
WITH acked AS (
    DELETE FROM outbox_jobs j
    USING unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[])) AS f(id, attempts)
    WHERE j.id = f.id AND j.attempts = f.attempts AND j.reserved_by = :worker
      AND j.cancel_requested_at IS NULL
      AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
    RETURNING j.id
),
clock AS (SELECT {now_ms} AS ms, set_config('synchronous_commit', 'off', true) AS async),
picked AS (
    SELECT id FROM outbox_jobs
    WHERE slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
      AND queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT ms FROM clock)
      AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
    ORDER BY priority, available_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE outbox_jobs j
    SET reserved_by = :worker, reserved_at = clock.ms,
        lease_expires_at = clock.ms + :lease_ms, attempts = j.attempts + 1
    FROM clock
    WHERE j.slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1) AND j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.message_id, j.queue, j.job_name, j.payload, j.attempts,
              j.max_attempts, j.created_at, j.available_at, j.priority, j.trace_context, j.ordering_key
)
SELECT id, message_id, queue, job_name, payload, attempts, max_attempts, created_at,
       available_at, priority, trace_context, ordering_key
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM acked;

-- name: ring_rotate
-- One pass of the rotation (outbox_ring_rotate in storage/ring.sql says what it does);
-- its answer: rotated, busy, recent, clean, backlog or locked.
SELECT outbox_ring_rotate(:min_dead, :every_ms, :max_move, :lock_timeout);

-- name: ring_state
-- The ring as status reports it: current slot, slots, rotations, last rotation (ms).
SELECT slot, slots, rotations, rotated_at FROM outbox_queue_ring WHERE id = 1;
