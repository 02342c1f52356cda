-- name: ordering_lock
-- Lock a batch's key rows (:keys, sorted), creating those that do not exist: entering
-- the line and leaving it both start here, so the two serialise per key. ON CONFLICT DO
-- UPDATE locks the row it meets even when its WHERE (never true) updates nothing: a
-- lock, not a new version of the row a batch (as relay_handoff's lock). One statement
-- for the batch; the rows are taken in the order given, so two batches never wait on
-- each other in a circle.
INSERT INTO outbox_ordering_keys (key_digest)
SELECT k.key_digest
FROM unnest(CAST(:keys AS varchar[])) WITH ORDINALITY AS k (key_digest, ord)
ORDER BY k.ord
ON CONFLICT (key_digest) DO UPDATE SET key_digest = outbox_ordering_keys.key_digest
WHERE outbox_ordering_keys.key_digest IS NULL;

-- name: ordering_any_job
-- Those of :keys with a job in the queue (in its turn or waiting), or a dead letter
-- that holds it (dead_letter_holds_key). Read after ordering_lock, in a statement of its
-- own: its snapshot then sees every transaction that held a key's lock before us
-- (one statement with the lock would read a snapshot taken before the wait).
SELECT k.key_digest
FROM unnest(CAST(:keys AS varchar[])) AS k (key_digest)
WHERE EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.ordering_key = k.key_digest)
   OR EXISTS (SELECT 1 FROM outbox_failed_jobs f
              WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1);

-- name: ordering_promote_free
-- After jobs of :keys left the queue (their rows locked by ordering_lock): each key with
-- no job in its turn and no dead letter holding it gives its turn to its waiting job
-- with the lowest id (the due time it had before it waited). One statement for the
-- batch, in a snapshot taken after the locks; ordering_drop_free follows, for the keys
-- not returned (a key given a turn has a job: its row stays).
UPDATE outbox_jobs SET available_at = available_at - {blocked_offset_ms}
WHERE available_at >= {blocked_offset_ms} AND id IN (
    SELECT (SELECT w.id FROM outbox_jobs w
            WHERE w.ordering_key = k.key_digest AND w.available_at >= {blocked_offset_ms}
            ORDER BY w.id LIMIT 1)
    FROM unnest(CAST(:keys AS varchar[])) AS k (key_digest)
    WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j
                      WHERE j.ordering_key = k.key_digest
                        AND j.available_at < {blocked_offset_ms})
      AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                      WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1))
RETURNING ordering_key;

-- name: ordering_ack_leave
-- An acknowledgement of jobs of :keys (their rows locked by ordering_lock, a statement
-- before: this one's snapshot sees every transaction that held them) in one statement:
-- the fenced delete (ack_fenced), then ordering_promote_free and ordering_drop_free for
-- the same keys, which, reading the same snapshot, leave the acknowledged jobs out by
-- id. A key with a job still in its turn (one this worker lost) keeps its line. Three
-- statements of the acknowledgement become one; the claim follows.
WITH acked AS ({fragment:ack_fenced}
), free AS MATERIALIZED (
    SELECT k.key_digest
    FROM unnest(CAST(:keys AS varchar[])) AS k (key_digest)
    WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j
                      WHERE j.ordering_key = k.key_digest
                        AND j.available_at < {blocked_offset_ms}
                        AND j.id NOT IN (SELECT id FROM acked))
      AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                      WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1)
), promoted AS (
    UPDATE outbox_jobs SET available_at = available_at - {blocked_offset_ms}
    WHERE available_at >= {blocked_offset_ms} AND id IN (
        SELECT (SELECT w.id FROM outbox_jobs w
                WHERE w.ordering_key = f.key_digest AND w.available_at >= {blocked_offset_ms}
                ORDER BY w.id LIMIT 1)
        FROM free f)
    RETURNING id
), dropped AS (
    -- The keys as an array (an InitPlan): probes of the primary key (IN (SELECT ...)
    -- planned a hash join over every key row).
    DELETE FROM outbox_ordering_keys k
    WHERE k.key_digest = ANY(ARRAY(SELECT key_digest FROM free))
      AND NOT EXISTS (SELECT 1 FROM outbox_jobs j
                      WHERE j.ordering_key = k.key_digest
                        AND j.id NOT IN (SELECT id FROM acked))
)
SELECT id FROM acked;

-- name: ordering_drop_free
-- ... and the rows of those of :keys with no job left at all (nor a dead letter holding
-- them) go (the next job of the key creates its row again).
DELETE FROM outbox_ordering_keys k
WHERE k.key_digest = ANY(CAST(:keys AS varchar[]))
  AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.ordering_key = k.key_digest)
  AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                  WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1);

-- name: relay_insert_jobs_ordered
-- relay_insert_jobs for a batch with keyed rows that enter behind another job of their
-- key (:waiting, outbox ids): those enter already waiting their turn (available_at
-- shifted by the offset), in the same INSERT. No second write of each waiting row (an
-- UPDATE after the insert rewrote it and each of its index entries: the relay's
-- costliest step with many keys).
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
    coalesce(available_at, clock.now_ms)
      + CASE WHEN id = ANY(CAST(:waiting AS bigint[])) THEN {blocked_offset_ms} ELSE 0 END,
    clock.now_ms, priority, trace_context, ordering_key
FROM outbox_messages,
    (SELECT {now_ms} AS now_ms) AS clock
WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending'
ORDER BY id;

-- name: relay_ordering_earlier
-- For each key of a batch, its oldest pending intent outside the batch (another relay
-- holds it, or it was deferred): the batch's later intents of that key wait for it.
-- Only one older than the batch's newest (:max_id) can hold any of them back, so each
-- key's range of outbox_messages_ordering stops there: the key's backlog behind the
-- batch is never read (it was, every batch: 20 intents a key read for 1 moved).
SELECT ordering_key, min(id) FROM outbox_messages
WHERE ordering_key = ANY(CAST(:keys AS varchar[])) AND id < :max_id AND state = 'pending'
  AND NOT (id = ANY(CAST(:ids AS bigint[])))
GROUP BY ordering_key;
