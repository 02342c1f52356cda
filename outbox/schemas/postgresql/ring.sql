-- The ring storage's own statements (outbox.db.ring; ADR 5,
-- docs/explanation/adr/0005-queue-ring-storage.md). Every other statement reads and
-- writes outbox_jobs as it does the heap: the partitioned parent takes them unchanged
-- (an insert lands in the current slot through the column's default, which each
-- rotation sets). Only the claim differs: it reads the current slot alone (the ring's
-- row read by an InitPlan, so PostgreSQL prunes the other partitions at executor
-- start-up and never walks their dead index entries).

-- name: ring_installed
-- Is outbox_jobs the ring's partitioned parent?
SELECT to_regclass('outbox_queue_ring') IS NOT NULL;

-- name: ring_job_claim
-- job_claim (queue.sql) on the current slot only.
WITH {fragment:claim_clock},
picked AS (
    SELECT id FROM outbox_jobs
    WHERE slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
      AND {fragment:claim_due}
)
UPDATE outbox_jobs j
{fragment:claim_mark}
WHERE j.slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
  AND j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING {fragment:claimed_columns};

-- name: ring_job_ack_claim
-- job_ack_claim (queue.sql) with ring_job_claim's claim: the acknowledgement finds its
-- rows in whichever slot they are.
WITH acked AS ({fragment:ack_fenced}),
{fragment:claim_clock},
picked AS (
    SELECT id FROM outbox_jobs
    WHERE slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
      AND {fragment:claim_due}
),
claimed AS (
    UPDATE outbox_jobs j
    {fragment:claim_mark}
    WHERE j.slot = (SELECT r.slot FROM outbox_queue_ring r WHERE r.id = 1)
      AND j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING {fragment:claimed_columns}
)
{fragment:ack_claim_rows};

-- name: ring_rotate
-- One pass of the rotation (outbox_ring_rotate in storage/ring.sql says what it does);
-- its answer: rotated, busy, recent, clean, backlog or locked.
SELECT outbox_ring_rotate(:min_dead, :every_ms, :max_move, :lock_timeout);

-- name: ring_state
-- The ring as status reports it: current slot, slots, rotations, last rotation (ms).
SELECT slot, slots, rotations, rotated_at FROM outbox_queue_ring WHERE id = 1;
