-- Migration: table hygiene for the high-churn tables.
--
-- outbox_messages and outbox_jobs are queues: nearly every row is inserted, changed a
-- few times and deleted within seconds, so dead tuples pile up far faster than the
-- default autovacuum trigger (20% of the table's live rows, which for a table that is
-- usually near-empty between bursts means "rarely", and for a big backlog means "after
-- hundreds of thousands of dead rows"). Dead index entries are what the claim and the
-- relay's scans wade through, so each table is vacuumed after a fixed number of dead
-- rows instead, with the cost limit raised so a vacuum finishes before the next burst.
--
-- outbox_jobs rows are updated in place by every claim, heartbeat and release; a
-- fillfactor of 80 leaves room on each page for the new row versions, which keeps a
-- job's versions on one page (fewer pages touched per claim, less index churn).
-- outbox_messages rows are written once and deleted, outbox_keys rows are written once
-- and pruned in batches: both keep the default fillfactor of 100.
--
-- Rows quarantined or left as tombstones (state <> 'pending') are few and rarely
-- written; one partial index over them lets status count them, and prune find old
-- tombstones, without reading the pending backlog. Pending rows never enter it.

ALTER TABLE outbox_jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

ALTER TABLE outbox_messages SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

ALTER TABLE outbox_keys SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

CREATE INDEX IF NOT EXISTS outbox_messages_not_pending
    ON outbox_messages (state, published_at) WHERE state <> 'pending';
