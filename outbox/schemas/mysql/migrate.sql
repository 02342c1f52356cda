-- name: migrate_lock
-- A session lock: DDL commits implicitly on MariaDB, so no transaction can hold it.
SELECT GET_LOCK('outbox_migrate', 120);

-- name: migrate_unlock
SELECT RELEASE_LOCK('outbox_migrate');

-- name: migrate_has_version_table
SELECT count(*) > 0 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'outbox_schema_version';
