-- name: limit_lock
-- Every transaction here began with BEGIN IMMEDIATE: SQLite's one writer lock already
-- serialises admissions; this only says whether the key's row exists yet.
SELECT limit_key FROM outbox_limits WHERE limit_key = :key;

-- name: limit_key_add
INSERT OR IGNORE INTO outbox_limits (limit_key, created_at) VALUES (:key, {now_ms});

-- name: limit_wait_add
INSERT OR IGNORE INTO outbox_limit_waits (limit_key, job_id) VALUES (:key, :job_id);

-- name: limit_slot_take
-- A slot for this attempt; one left by an earlier attempt of the job (reaped or handed
-- back) is replaced.
INSERT OR REPLACE INTO outbox_limit_slots (limit_key, job_id, attempts, holder, expires_at)
VALUES (:key, :job_id, :attempts, :holder, :now + :lease_ms);
