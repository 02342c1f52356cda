-- name: migrate_versions
SELECT version FROM outbox_schema_version ORDER BY version;

-- name: migrate_record_version
INSERT INTO outbox_schema_version (version, description, applied_at)
VALUES (:version, :description, {now_ms});

-- name: migrate_schema_1_writers
-- Traces of code of schema version 1 written in the last :window_ms: intents it wrote
-- (every later writer sets `keyed`), and tombstones its relay or the compatibility
-- trigger left (no later code writes state 'published'). With the newest time of each.
SELECT
    (SELECT count(*) FROM outbox_messages
     WHERE keyed IS NULL AND created_at >= {now_ms} - :window_ms),
    (SELECT max(created_at) FROM outbox_messages
     WHERE keyed IS NULL AND created_at >= {now_ms} - :window_ms),
    (SELECT count(*) FROM outbox_messages
     WHERE state = 'published' AND published_at >= {now_ms} - :window_ms),
    (SELECT max(published_at) FROM outbox_messages
     WHERE state = 'published' AND published_at >= {now_ms} - :window_ms);
