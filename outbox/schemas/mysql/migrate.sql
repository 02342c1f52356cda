-- name: migrate_lock
-- A session lock: DDL commits implicitly on MariaDB, so no transaction can hold it.
SELECT GET_LOCK('outbox_migrate', 120);

-- name: migrate_unlock
SELECT RELEASE_LOCK('outbox_migrate');

-- name: migrate_has_version_table
SELECT count(*) > 0 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'outbox_schema_version';

-- name: migrate_versions
SELECT version FROM outbox_schema_version ORDER BY version;

-- name: migrate_record_version
INSERT INTO outbox_schema_version (version, description, applied_at)
VALUES (:version, :description, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
