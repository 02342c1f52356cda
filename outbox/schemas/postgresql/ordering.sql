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
-- (one statement with the lock would read a snapshot taken before the wait). A job in
-- its turn and a waiting one are in two partial indexes: a probe of each.
SELECT k.key_digest
FROM unnest(CAST(:keys AS varchar[])) AS k (key_digest)
WHERE EXISTS (SELECT 1 FROM outbox_jobs j
              WHERE j.ordering_key = k.key_digest AND j.available_at < {blocked_offset_ms})
   OR EXISTS (SELECT 1 FROM outbox_jobs w
              WHERE w.ordering_key = k.key_digest AND w.available_at >= {blocked_offset_ms})
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

-- fragment: ordering_free
-- An acknowledgement's keys (:keys, their rows locked by ordering_lock a statement before:
-- this snapshot sees every transaction that held them) that give their turn on: no job
-- of the key left in its turn but those just acknowledged (acked, left out by id: the
-- same snapshot still sees them), and no dead letter holding the key. A key with a job
-- still in its turn (one this worker lost) keeps its line.
free AS MATERIALIZED (
    SELECT k.key_digest
    FROM unnest(CAST(:keys AS varchar[])) AS k (key_digest)
    WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j
                      WHERE j.ordering_key = k.key_digest
                        AND j.available_at < {blocked_offset_ms}
                        AND j.id NOT IN (SELECT id FROM acked))
      AND NOT EXISTS (SELECT 1 FROM outbox_failed_jobs f
                      WHERE f.ordering_key = k.key_digest AND f.ordering_held = 1)
),
-- Each free key's waiting job with the lowest id: the next in its line.
nextup AS MATERIALIZED (
    SELECT f.key_digest, w.id, w.queue, w.priority,
           w.available_at - {blocked_offset_ms} AS due_at
    FROM free f
    CROSS JOIN LATERAL (
        SELECT w.id, w.queue, w.priority, w.available_at FROM outbox_jobs w
        WHERE w.ordering_key = f.key_digest AND w.available_at >= {blocked_offset_ms}
        ORDER BY w.id LIMIT 1) w
)

-- fragment: ordering_drop_done
-- An acknowledgement's last CTE: the rows of the free keys with no next job go. Free
-- read every job of the key in its turn but the acknowledged ones, nextup every waiting
-- one, so such a key has nothing left. Only those keys are probed, by primary key (the
-- keys as an array, an InitPlan; IN (SELECT ...) planned a hash join over every key
-- row, and probing every free key, most of them given a turn, compared each key row
-- with each of them: 4 ms of 8.5 for 100 keys over 1,000 key rows).
dropped AS (
    DELETE FROM outbox_ordering_keys k
    WHERE k.key_digest = ANY(ARRAY(
        SELECT f.key_digest FROM free f
        WHERE NOT EXISTS (SELECT 1 FROM nextup n WHERE n.key_digest = f.key_digest)))
)

-- name: ordering_ack_leave
-- An acknowledgement of jobs of :keys (their rows locked by ordering_lock) in one
-- statement: the fenced delete (ack_fenced), then ordering_promote_free and
-- ordering_drop_free for the same keys (ordering_free, ordering_drop_done). Three
-- statements of the acknowledgement become one; ordering_ack_claim when a claim rides
-- along.
WITH acked AS ({fragment:ack_fenced}
), {fragment:ordering_free},
promoted AS (
    UPDATE outbox_jobs SET available_at = available_at - {blocked_offset_ms}
    WHERE available_at >= {blocked_offset_ms} AND id = ANY (ARRAY(SELECT id FROM nextup))
), {fragment:ordering_drop_done}
SELECT id FROM acked;

-- name: ordering_ack_claim
-- job_ack_claim with keyed jobs among those acknowledged (their keys' rows locked by
-- ordering_lock, a statement before), in one statement: ordering_ack_leave, and a claim
-- that takes the keys' next jobs in the same write that gives them their turn. A claim
-- after the promotion (job_claim) wrote each of those rows a second time, index entries
-- and all. Here the jobs claim_due picked are ranked beside the next jobs the claim may
-- take (of :queue, due, the queue not paused: claim_due's conditions), most urgent
-- first as job_claim ranks them, and :limit of them are taken in one UPDATE (a next
-- job's available_at back to its due time as it is marked): what job_claim would take
-- after ordering_ack_leave. The next jobs not taken get their turn alone. Answers as
-- job_ack_claim does; commits asynchronously as it does.
WITH acked AS ({fragment:ack_fenced}
), {fragment:claim_clock},
{fragment:ordering_free},
picked AS (
    SELECT id, priority, available_at FROM outbox_jobs
    WHERE {fragment:claim_due}
), chosen AS MATERIALIZED (
    SELECT c.id FROM (
        SELECT id, priority, available_at FROM picked
        UNION ALL
        SELECT id, priority, due_at FROM nextup
        WHERE queue = :queue AND due_at <= (SELECT ms FROM clock)
          AND NOT EXISTS (SELECT 1 FROM outbox_paused_queues p WHERE p.queue = :queue)
    ) AS c
    ORDER BY c.priority, c.available_at, c.id
    LIMIT :limit
), claimed AS (
    UPDATE outbox_jobs j
    {fragment:claim_mark},
        available_at = CASE WHEN j.available_at >= {blocked_offset_ms}
                            THEN j.available_at - {blocked_offset_ms}
                            ELSE j.available_at END
    FROM clock
    WHERE j.id = ANY (ARRAY(SELECT id FROM chosen))
    RETURNING {fragment:claimed_columns}
), promoted AS (
    UPDATE outbox_jobs SET available_at = available_at - {blocked_offset_ms}
    WHERE available_at >= {blocked_offset_ms}
      AND id = ANY (ARRAY(SELECT id FROM nextup EXCEPT SELECT id FROM chosen))
), {fragment:ordering_drop_done}
{fragment:ack_claim_rows};

-- name: ordering_drop_free
-- ... and the rows of those of :keys with no job left at all (nor a dead letter holding
-- them) go (the next job of the key creates its row again).
DELETE FROM outbox_ordering_keys k
WHERE k.key_digest = ANY(CAST(:keys AS varchar[]))
  AND NOT EXISTS (SELECT 1 FROM outbox_jobs j
                  WHERE j.ordering_key = k.key_digest AND j.available_at < {blocked_offset_ms})
  AND NOT EXISTS (SELECT 1 FROM outbox_jobs w
                  WHERE w.ordering_key = k.key_digest AND w.available_at >= {blocked_offset_ms})
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
