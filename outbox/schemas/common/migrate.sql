-- name: migrate_versions
SELECT version FROM outbox_schema_version ORDER BY version;

-- name: migrate_record_version
INSERT INTO outbox_schema_version (version, description, applied_at)
VALUES (:version, :description, {now_ms});
