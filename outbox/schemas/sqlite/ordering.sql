-- name: ordering_lock
-- A batch's key rows (:keys), created where they do not exist, in one statement. SQLite
-- has one writer, so nothing waits here; the rows mark the keys with jobs (the reaper's
-- heal and ordering_leave read them).
INSERT INTO outbox_ordering_keys (key_digest)
SELECT k.value FROM json_each(:keys_json) AS k WHERE true
ORDER BY k.key
ON CONFLICT (key_digest) DO NOTHING;

-- name: ordering_lock_created
-- ordering_lock for a relay batch, returning the keys whose rows it created: those have
-- no job in the queue and no dead letter holding them (a key row lives exactly that
-- long), so their first job enters in its turn (outbox.db.ordering.enter_created). One
-- writer: no other transaction's row to wait for or miss.
INSERT INTO outbox_ordering_keys (key_digest)
SELECT k.value FROM json_each(:keys_json) AS k WHERE true
ORDER BY k.key
ON CONFLICT (key_digest) DO NOTHING
RETURNING key_digest;

-- name: ordering_any_job
-- Those of :keys with a job in the queue (in its turn or waiting), or a dead letter
-- that holds it (dead_letter_holds_key). Read after ordering_lock.
SELECT k.value FROM json_each(:keys_json) AS k
WHERE EXISTS (SELECT 1 FROM outbox_jobs j
              WHERE j.ordering_key = k.value AND j.available_at < {blocked_offset_ms})
   OR EXISTS (SELECT 1 FROM outbox_jobs w
              WHERE w.ordering_key = k.value AND w.available_at >= {blocked_offset_ms})
   OR EXISTS (SELECT 1 FROM outbox_failed_jobs f
              WHERE f.ordering_key = k.value AND f.ordering_held = 1);

-- name: ordering_promote_free
-- After jobs of :keys left the queue: each key with no job in its turn and no dead
-- letter holding it gives its turn to its waiting job with the lowest id (the due time
-- it had before it waited). One statement for the batch; ordering_drop_free follows.
UPDATE outbox_jobs SET available_at = available_at - {blocked_offset_ms}
WHERE available_at >= {blocked_offset_ms} AND id IN (
    SELECT (SELECT w.id FROM outbox_jobs w
            WHERE w.ordering_key = k.value AND w.available_at >= {blocked_offset_ms}
            ORDER BY w.id LIMIT 1)
    FROM json_each(:keys_json) AS k
    WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j
                      WHERE j.ordering_key = k.value AND j.available_at < {blocked_offset_ms})
      AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                      WHERE f.ordering_key = k.value AND f.ordering_held = 1))
RETURNING ordering_key;

-- name: ordering_drop_free
-- ... and the rows of those of :keys with no job left at all (nor a dead letter holding
-- them) go (the next job of the key creates its row again).
DELETE FROM outbox_ordering_keys
WHERE key_digest IN (SELECT value FROM json_each(:keys_json))
  AND NOT EXISTS (SELECT 1 FROM outbox_jobs j
                  WHERE j.ordering_key = outbox_ordering_keys.key_digest
                    AND j.available_at < {blocked_offset_ms})
  AND NOT EXISTS (SELECT 1 FROM outbox_jobs w
                  WHERE w.ordering_key = outbox_ordering_keys.key_digest
                    AND w.available_at >= {blocked_offset_ms})
  AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                  WHERE f.ordering_key = outbox_ordering_keys.key_digest AND f.ordering_held = 1);

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
      + CASE WHEN id IN (SELECT value FROM json_each(:waiting)) THEN {blocked_offset_ms}
        ELSE 0 END,
    clock.now_ms, priority, trace_context, ordering_key
FROM outbox_messages,
    (SELECT {now_ms} AS now_ms) AS clock
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
ORDER BY id;

-- name: relay_ordering_earlier
-- For each key of a batch, its oldest pending intent outside the batch (another relay
-- holds it, or it was deferred): the batch's later intents of that key wait for it.
-- Only one older than the batch's newest (:max_id) can hold any of them back, so each
-- key's range of outbox_messages_ordering stops there: the key's backlog behind the
-- batch is never read (it was, every batch: 20 intents a key read for 1 moved).
SELECT ordering_key, min(id) FROM outbox_messages
WHERE ordering_key IN (SELECT value FROM json_each(:keys)) AND id < :max_id
  AND state = 'pending' AND id NOT IN (SELECT value FROM json_each(:ids))
GROUP BY ordering_key;
