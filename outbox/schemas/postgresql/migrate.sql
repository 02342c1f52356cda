-- name: migrate_lock
-- Held until the transaction ends: two migrators run one after the other.
SELECT pg_advisory_xact_lock(7346105212648237313);

-- name: migrate_has_version_table
SELECT to_regclass('outbox_schema_version') IS NOT NULL;
