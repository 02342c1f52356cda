-- Global concurrency and rate limits (outbox.db.limits, outbox.queue.gate). Every
-- statement here runs inside one admission, release or heartbeat transaction, after
-- the key's row in outbox_limits was locked (limit_lock), and only for job names that
-- have limits: the unlimited path never runs any of them. :now is the clock, read once
-- per transaction. Each reaches its rows by a key prefix: outbox_limit_slots' and
-- outbox_limit_waits' primary keys (limit_key, job_id), outbox_limit_starts_key
-- (limit_key, started_at), outbox_limit_starts_job and outbox_limit_waits_job (job_id),
-- outbox_jobs' primary key.

-- name: limit_slot_clear_expired
-- Slots whose lease ran out (a crashed or stalled worker): free again.
DELETE FROM outbox_limit_slots WHERE limit_key = :key AND expires_at <= :now;

-- name: limit_slot_count
-- The live slots of a key and when the first of them expires (the fallback wake-up).
SELECT COUNT(*), MIN(expires_at) FROM outbox_limit_slots WHERE limit_key = :key;

-- name: limit_slot_free
-- The job settled: its slot goes, only while this attempt of this holder has it.
DELETE FROM outbox_limit_slots
WHERE limit_key = :key AND job_id = :job_id AND attempts = :attempts AND holder = :holder;

-- name: limit_slot_renew
-- Heartbeat: the slot lives as long as the job's lease.
UPDATE outbox_limit_slots SET expires_at = {now_ms} + :lease_ms
WHERE limit_key = :key AND job_id = :job_id AND attempts = :attempts AND holder = :holder;

-- name: limit_start_prune
-- Starts older than the window no longer count; tickets that old are spent too.
DELETE FROM outbox_limit_starts WHERE limit_key = :key AND started_at <= :since;

-- name: limit_start_count
-- The starts (not tickets) within the window: what the limit counts. The unary plus
-- keeps SQLite off outbox_limit_starts_job: its statistics average the one NULL value
-- (every start) with the tickets' job ids and guess `job_id IS NULL` matches a handful
-- of rows, so it read every start of every key through that index (the plan tests
-- caught it at 200,000 starts). Through outbox_limit_starts_key it reads one key's window.
SELECT COUNT(*) FROM outbox_limit_starts
WHERE limit_key = :key AND started_at > :since AND +job_id IS NULL;

-- name: limit_start_nth_latest
-- The rate-th latest start or ticket of a key (OFFSET rate - 1): the next ticket goes one
-- window after it. Walks outbox_limit_starts_key backwards, at most rate entries.
SELECT started_at FROM outbox_limit_starts
WHERE limit_key = :key
ORDER BY started_at DESC
LIMIT 1 OFFSET :skip;

-- name: limit_start_nth_oldest
-- The skip-th oldest start (not ticket) within the window: room for one more comes one
-- window after it. Walks outbox_limit_starts_key forwards from the window's start.
SELECT started_at FROM outbox_limit_starts
WHERE limit_key = :key AND started_at > :since AND job_id IS NULL
ORDER BY started_at
LIMIT 1 OFFSET :skip;

-- name: limit_start_ticket
-- The ticket this job took under this key when it was last deferred, if any.
SELECT started_at FROM outbox_limit_starts WHERE job_id = :job_id AND limit_key = :key;

-- name: limit_start_drop_ticket
-- The job starts (or takes a new ticket): its old one goes.
DELETE FROM outbox_limit_starts WHERE job_id = :job_id AND limit_key = :key;

-- name: limit_start_take
-- A start now (job_id NULL), or a ticket at :at for :job_id.
INSERT INTO outbox_limit_starts (limit_key, started_at, job_id) VALUES (:key, :at, :job_id);

-- name: limit_wait_first
-- The oldest job waiting for a slot of this key.
SELECT job_id FROM outbox_limit_waits WHERE limit_key = :key ORDER BY job_id LIMIT 1;

-- name: limit_wait_drop
DELETE FROM outbox_limit_waits WHERE limit_key = :key AND job_id = :job_id;

-- name: limit_wait_drop_job
-- An admitted job waits no more, under any key.
DELETE FROM outbox_limit_waits WHERE job_id = :job_id;

-- name: limit_wake
-- A slot was freed: the waiting job is due now instead of at its fallback time.
UPDATE outbox_jobs SET available_at = :now
WHERE id = :job_id AND reserved_by IS NULL AND available_at > :now;

-- name: limit_job_wait
-- Over a limit: back to the queue unspent (attempt refunded), due when room is expected.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempts = attempts - 1, available_at = :until
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts;

-- name: limit_job_return
-- No free thread in this worker for it: back unspent, keeping its place in the queue.
UPDATE outbox_jobs
SET reserved_by = NULL, reserved_at = NULL, lease_expires_at = NULL,
    attempts = attempts - 1
WHERE id = :id AND reserved_by = :holder AND attempts = :attempts;

-- name: limit_prune_waits
-- outbox prune: waits of jobs no longer in the queue (removed or dead-lettered while they
-- waited); a freed slot skips such waiters, this clears them.
DELETE FROM outbox_limit_waits
WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_limit_waits.job_id);

-- name: limit_prune_starts
-- outbox prune: starts and tickets older than the longest window (a rate per hour) count
-- for nothing; admissions prune a key's own, but a key no longer used keeps them. In
-- batches, each its own transaction. (The derived table is for MariaDB, which takes no
-- LIMIT in an IN subquery nor the deleted table in one.)
DELETE FROM outbox_limit_starts WHERE id IN (
    SELECT id FROM (
        SELECT id FROM outbox_limit_starts WHERE started_at < {now_ms} - :older_ms LIMIT :batch
    ) AS spent
);

-- name: limit_prune_slots
-- outbox prune: slots whose lease ran out that long ago are free already (an admission of
-- their key would clear them); a crashed worker's slot of a key no longer used stays else.
DELETE FROM outbox_limit_slots WHERE (limit_key, job_id) IN (
    SELECT limit_key, job_id FROM (
        SELECT limit_key, job_id FROM outbox_limit_slots
        WHERE expires_at < {now_ms} - :older_ms
        LIMIT :batch
    ) AS expired
);

-- name: limit_prune_keys
-- outbox prune: key rows with nothing left under them. Deleting one is always safe: the
-- row only anchors the lock, and the next admission of the key creates it again.
DELETE FROM outbox_limits WHERE limit_key IN (
    SELECT limit_key FROM (
        SELECT k.limit_key FROM outbox_limits k
        WHERE k.created_at < {now_ms} - :older_ms
            AND NOT EXISTS (SELECT 1 FROM outbox_limit_slots s WHERE s.limit_key = k.limit_key)
            AND NOT EXISTS (SELECT 1 FROM outbox_limit_starts t WHERE t.limit_key = k.limit_key)
            AND NOT EXISTS (SELECT 1 FROM outbox_limit_waits w WHERE w.limit_key = k.limit_key)
        LIMIT :batch
    ) AS idle
);
