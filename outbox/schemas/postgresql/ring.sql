-- The ring storage's own statements (outbox.db.ring; ADR 5,
-- docs/explanation/adr/0005-queue-ring-storage.md). Every statement on jobs, the claim
-- included, reads and writes outbox_jobs as it does the heap: the partitioned parent
-- takes them unchanged, and its only attached partition is the current slot, its DEFAULT
-- partition (every insert lands there; a claim never walks another slot's dead index
-- entries, since no other slot is attached).

-- name: ring_installed
-- Is outbox_jobs the ring's partitioned parent?
SELECT to_regclass('outbox_queue_ring') IS NOT NULL;

-- name: ring_rotate
-- One pass of the rotation (outbox_ring_rotate in storage/ring.sql says what it does);
-- its answer: rotated, busy, recent, clean, backlog or locked.
SELECT outbox_ring_rotate(:min_dead, :every_ms, :max_move, :lock_timeout);
