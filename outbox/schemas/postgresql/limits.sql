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

-- name: limit_prune_starts
-- outbox prune: starts and tickets older than the longest window (a rate per hour) count
-- for nothing; admissions prune a key's own, but a key no longer used keeps them. In
-- batches (each its own transaction), oldest reachable first.
DELETE FROM outbox_limit_starts WHERE id IN (
    SELECT id FROM outbox_limit_starts WHERE started_at < {now_ms} - :older_ms LIMIT :batch
);

-- name: limit_prune_slots
-- outbox prune: slots whose lease ran out that long ago are free already (an admission of
-- their key would clear them); a crashed worker's slot of a key no longer used stays else.
DELETE FROM outbox_limit_slots WHERE (limit_key, job_id) IN (
    SELECT limit_key, job_id FROM outbox_limit_slots
    WHERE expires_at < {now_ms} - :older_ms
    LIMIT :batch
);

-- name: limit_prune_keys
-- outbox prune: key rows with nothing left under them. Deleting one is always safe: the
-- row only anchors the lock, and the next admission of the key creates it again.
DELETE FROM outbox_limits WHERE limit_key IN (
    SELECT k.limit_key FROM outbox_limits k
    WHERE k.created_at < {now_ms} - :older_ms
        AND NOT EXISTS (SELECT 1 FROM outbox_limit_slots s WHERE s.limit_key = k.limit_key)
        AND NOT EXISTS (SELECT 1 FROM outbox_limit_starts t WHERE t.limit_key = k.limit_key)
        AND NOT EXISTS (SELECT 1 FROM outbox_limit_waits w WHERE w.limit_key = k.limit_key)
    LIMIT :batch
);
