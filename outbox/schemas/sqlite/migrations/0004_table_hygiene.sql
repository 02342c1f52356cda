-- Migration: table hygiene for the high-churn tables.
--
-- SQLite has no per-table autovacuum or fillfactor settings (PostgreSQL's half of this
-- migration sets them): freed pages are reused by later inserts, and the file only
-- shrinks on VACUUM, which `auto_vacuum` would have to be chosen before the first table
-- is created. What SQLite does share is the index below.
--
-- Rows quarantined or left as tombstones (state <> 'pending') are few and rarely
-- written; one partial index over them lets status count them, and prune find old
-- tombstones, without reading the pending backlog. Pending rows never enter it.

CREATE INDEX IF NOT EXISTS outbox_messages_not_pending
    ON outbox_messages (state, published_at) WHERE state <> 'pending';
