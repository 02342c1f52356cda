-- Ordering keys (outbox.db.ordering): the jobs of one key run one at a time, in the
-- order they entered the queue. Every statement here finds a key's jobs through
-- outbox_jobs_ordering_waiting (its waiting jobs) and outbox_jobs_ordering_live (its job
-- in its turn), partial indexes of keyed rows only (MariaDB: outbox_jobs_ordering and
-- outbox_jobs_ordering_at); none runs for a job without a key.

-- name: ordering_block
-- A job just put in the queue behind another of its key: it waits its turn.
UPDATE outbox_jobs SET available_at = available_at + {blocked_offset_ms}
WHERE message_id = :message_id AND available_at < {blocked_offset_ms};

-- name: ordering_held_keys
-- `outbox status` and the dashboard: the keys dead letters hold (dead_letter_holds_key),
-- each with the dead letter's message id (what `queue retry` / `queue forget` take).
SELECT ordering_key, message_id, job_name, queue FROM outbox_failed_jobs
WHERE ordering_held = 1
ORDER BY id
LIMIT :limit;

-- name: ordering_dead_key
-- The ordering key a dead letter holds (`queue forget` passes its turn on).
SELECT ordering_key FROM outbox_failed_jobs
WHERE message_id = :message_id AND ordering_held = 1;

-- name: ordering_blocked_count
-- `outbox status`: jobs waiting for their key's turn, and the keys they wait on.
SELECT count(*), count(DISTINCT ordering_key) FROM outbox_jobs
WHERE ordering_key IS NOT NULL AND available_at >= {blocked_offset_ms};

-- name: ordering_stranded
-- A page of key rows, by primary key from :after up to :until, each with 1 when no job
-- of the key is in its turn and no dead letter holds it, and 1 when it has a job (then a waiting one): its waiting jobs (if any) were
-- left without a turn by a writer that does not pass it on (code of the previous
-- version during a rolling upgrade). The reaper passes it on (outbox.db.ordering.leave
-- re-checks each under the key's lock); a key with no job at all is dropped. In steady
-- state this finds only keys being entered right now. A range of the primary key and
-- two index probes a row: each reap pass reads one page from a random digest
-- (outbox.db.shared.ordering_heal), never every key row (it read them all, with both
-- probes each, to sort them by age).
SELECT k.key_digest,
    CASE WHEN EXISTS (
        SELECT 1 FROM outbox_jobs j
        WHERE j.ordering_key = k.key_digest AND j.available_at < {blocked_offset_ms})
      OR EXISTS (
        SELECT 1 FROM outbox_failed_jobs f
        WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1)
    THEN 0 ELSE 1 END,
    -- A scalar subquery: a probe of the key's waiting jobs per row. As an EXISTS it may
    -- be planned as one hashed scan of every waiting job (PostgreSQL drops the LIMIT).
    CASE WHEN (
        SELECT w.id FROM outbox_jobs w
        WHERE w.ordering_key = k.key_digest AND w.available_at >= {blocked_offset_ms}
        ORDER BY w.id LIMIT 1) IS NULL
    THEN 0 ELSE 1 END
FROM outbox_ordering_keys k
WHERE k.key_digest > :after AND k.key_digest <= :until
ORDER BY k.key_digest
LIMIT :limit;

-- name: ordering_key_of_job
-- A job's ordering key, read before a path that deletes the job locks the key's row
-- (the reaper's dead letter): the key's row is locked before the job's, as everywhere.
SELECT ordering_key FROM outbox_jobs WHERE id = :id;
