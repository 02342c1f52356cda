-- name: migrate_lock
-- Held until the transaction ends: two migrators run one after the other.
SELECT pg_advisory_xact_lock(7346105212648237313);

-- name: migrate_has_version_table
SELECT to_regclass('outbox_schema_version') IS NOT NULL;

-- name: migrate_versions
SELECT version FROM outbox_schema_version ORDER BY version;

-- name: migrate_record_version
INSERT INTO outbox_schema_version (version, description, applied_at)
VALUES (:version, :description, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
