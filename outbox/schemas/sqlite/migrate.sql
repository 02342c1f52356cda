-- name: migrate_lock
-- BEGIN IMMEDIATE already holds the writer lock; this statement only reads.
SELECT 1;

-- name: migrate_has_version_table
SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_schema_version';
