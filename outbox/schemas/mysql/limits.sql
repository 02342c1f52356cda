-- name: limit_lock
-- Lock a limited key's row: admissions, releases and wake-ups of one key serialise on
-- it (primary key), other keys go on in parallel.
SELECT limit_key FROM outbox_limits WHERE limit_key = :key FOR UPDATE;

-- name: limit_key_add
-- The key's first use: create its row (a racing creator's commit is waited for).
INSERT IGNORE INTO outbox_limits (limit_key, created_at) VALUES (:key, :now);

-- name: limit_wait_add
INSERT IGNORE INTO outbox_limit_waits (limit_key, job_id) VALUES (:key, :job_id);
