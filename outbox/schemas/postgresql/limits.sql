-- name: limit_lock
-- Lock a limited key's row: admissions, releases and wake-ups of one key serialise on
-- it (primary key), other keys go on in parallel.
SELECT limit_key FROM outbox_limits WHERE limit_key = :key FOR UPDATE;

-- name: limit_key_add
-- The key's first use: create its row (a racing creator's commit is waited for).
INSERT INTO outbox_limits (limit_key, created_at) VALUES (:key, {now_ms})
ON CONFLICT (limit_key) DO NOTHING;

-- name: limit_wait_add
INSERT INTO outbox_limit_waits (limit_key, job_id) VALUES (:key, :job_id)
ON CONFLICT (limit_key, job_id) DO NOTHING;

-- name: limit_slot_take
-- A slot for this attempt; one left by an earlier attempt of the job (reaped or handed
-- back) is taken over.
INSERT INTO outbox_limit_slots (limit_key, job_id, attempts, holder, expires_at)
VALUES (:key, :job_id, :attempts, :holder, :now + :lease_ms)
ON CONFLICT (limit_key, job_id) DO UPDATE
SET attempts = EXCLUDED.attempts, holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at;
