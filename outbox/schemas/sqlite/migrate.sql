-- name: migrate_lock
-- BEGIN IMMEDIATE already holds the writer lock; this statement only reads.
SELECT 1;

-- name: migrate_has_version_table
SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_schema_version';

-- name: migrate_versions
SELECT version FROM outbox_schema_version ORDER BY version;

-- name: migrate_record_version
INSERT INTO outbox_schema_version (version, description, applied_at)
VALUES (:version, :description, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER));
