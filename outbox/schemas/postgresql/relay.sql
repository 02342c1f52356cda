-- fragment: intent_reason
-- Why a stored intent fails verification, or NULL when it verifies. The reason codes
-- and their order match outbox.relay.verify.reason_for. PostgreSQL 15 has no JSON
-- validity test that cannot raise: a payload that is not JSON makes the ::json cast
-- fail with SQLSTATE 22P02, and the relay verifies that batch in Python instead.
CASE
    WHEN payload IS NULL OR json_typeof(payload::json) IS NULL THEN 'invalid_json'
    WHEN char_length(job_name) NOT BETWEEN 1 AND {max_name_chars}
        OR job_name ~ '[^A-Za-z0-9_.:-]' THEN 'invalid_name'
    WHEN char_length(queue) NOT BETWEEN 1 AND {max_name_chars}
        OR queue ~ '[^A-Za-z0-9_.:-]' THEN 'invalid_queue'
    WHEN max_attempts NOT BETWEEN 1 AND {max_attempts_limit} THEN 'invalid_max_attempts'
    WHEN available_at < 0 THEN 'invalid_available_at'
    WHEN octet_length(payload) > {max_payload_bytes} THEN 'payload_too_large'
    WHEN fingerprint IS NULL OR encode(sha256(convert_to(CASE
        WHEN ordering_key IS NOT NULL
        THEN concat_ws(E'\n', '{fingerprint_version_ordered}', job_name, queue,
            coalesce(max_attempts::text, ''), coalesce(available_at::text, ''),
            priority::text, ordering_key, payload)
        WHEN priority = 0
        THEN concat_ws(E'\n', '{fingerprint_version_default_priority}', job_name, queue,
            coalesce(max_attempts::text, ''), coalesce(available_at::text, ''),
            payload)
        ELSE concat_ws(E'\n', '{fingerprint_version}', job_name, queue,
            coalesce(max_attempts::text, ''), coalesce(available_at::text, ''),
            priority::text, payload)
        END, 'UTF8')), 'hex')
        <> fingerprint THEN 'fingerprint_mismatch'
END;

-- name: relay_handoff
-- One whole batch in one statement (one round trip): lock the oldest pending rows,
-- verify each in SQL, move the valid ones into the queue (insert there, delete here:
-- their key rows stay in outbox_keys), mark the others failed (with a reason code),
-- and, when :notify is true and anything was handed off, NOTIFY idle workers
-- (delivered at commit).
-- The clock also sets synchronous_commit off for this batch's own transaction (as the
-- worker's hot statements do, see queue_worker_session): the commit, and with it the
-- workers' NOTIFY, no longer waits for the WAL to reach the disk (~4 ms a commit here,
-- more behind the producers' flushes). A server crash can lose only the tail of the WAL,
-- and then the whole batch: its intents are pending again and go out again (at least
-- once). A handler's own synchronous commit flushes the WAL up to the batch first.
-- The reasons are the intent_reason fragment's; a payload that is not JSON makes this
-- statement fail and the relay verifies that batch in Python instead (relay_claim_rows).
-- A queue row that already holds a claimed message_id is a double handoff: the unique
-- index fails the statement on purpose.
-- Valid rows with an ordering key move in the same statement (outbox.db.ordering):
-- - seen, moving: a key's rows wait in the outbox (for a later batch) behind an older
--   pending intent of the key outside this batch (another relay holds it: the claim
--   skipped it), relay_ordering_earlier's rule, read from the range of pending rows the
--   claim walked instead of a probe of outbox_messages_ordering for each key.
-- - locked: the moving keys' rows are inserted or locked in sorted order (ordering_lock's
--   lock, taken in the same order; ON CONFLICT DO UPDATE locks the row it finds even
--   when its WHERE updates nothing, so an existing row costs a lock, not a new version).
--   The rows it returns, those it *created*, are the keys with no line: a key row exists
--   while the key has a job in the queue or a dead letter holding it (enter creates it,
--   leave drops it once the key has nothing, both under the row's lock), so a key whose
--   row is created here has no job in the queue, and its first row enters in its turn.
--   This answer reads no outbox_jobs, whose snapshot (taken before the statement waited
--   for a lock) could miss the job of a transaction that held the key's row: the insert
--   meets the row's latest version (and inserts after a concurrent delete). A key row
--   that outlived its jobs only makes the key's job wait; the reaper's heal gives it
--   its turn (ordering_stranded).
-- - ins: every other moving keyed row enters waiting (available_at shifted by the
--   offset), all in the one INSERT, in id order.
WITH claimed AS MATERIALIZED (
    SELECT ctid AS row_ctid, id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
        priority, trace_context, ordering_key
    FROM outbox_messages
    WHERE state = 'pending'
    ORDER BY id
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
), checked AS MATERIALIZED (
    SELECT c.*,
        {fragment:intent_reason} AS reason
    FROM claimed c
), clock AS MATERIALIZED (
    SELECT {now_ms} AS now_ms, set_config('synchronous_commit', 'off', true) AS async
), keyed AS MATERIALIZED (
    SELECT id, ordering_key FROM checked WHERE reason IS NULL AND ordering_key IS NOT NULL
), seen AS MATERIALIZED (
    -- The pending rows the claim walked, up to the batch's newest keyed row: its own and
    -- those another relay holds (skipped), at most 8 batches of them. One range of
    -- outbox_messages_pending, never a probe a key.
    SELECT id, ordering_key FROM outbox_messages
    WHERE state = 'pending' AND id <= (SELECT max(id) FROM keyed)
    ORDER BY id
    LIMIT :batch_size * 8
), moving AS MATERIALIZED (
    SELECT id, ordering_key, row_number() OVER (PARTITION BY ordering_key ORDER BY id) AS nth
    FROM (
        SELECT id, ordering_key, ours,
            min(CASE WHEN NOT ours THEN id END) OVER (PARTITION BY ordering_key) AS held_at
        FROM (
            SELECT id, ordering_key, true AS ours FROM keyed
            UNION ALL
            SELECT id, ordering_key, false FROM seen
            WHERE ordering_key IS NOT NULL AND id NOT IN (SELECT id FROM claimed)
        ) rows_of_keys
    ) w
    WHERE ours AND (held_at IS NULL OR id < held_at)
      -- past the rows seen (8 batches held by others), an older row may be unseen: wait
      AND ((SELECT count(*) FROM seen) < :batch_size * 8 OR id <= (SELECT max(id) FROM seen))
), locked AS MATERIALIZED (
    INSERT INTO outbox_ordering_keys (key_digest)
    SELECT DISTINCT ordering_key FROM moving ORDER BY ordering_key
    ON CONFLICT (key_digest) DO UPDATE SET key_digest = outbox_ordering_keys.key_digest
    WHERE outbox_ordering_keys.key_digest IS NULL  -- never: lock the row, write nothing
    RETURNING key_digest
), turns AS MATERIALIZED (
    -- A hashed subplan over locked: every key is locked before the first row is read
    -- (a join on the key planned a nested loop of 500 x 500 rows for a batch).
    SELECT m.id, NOT (m.nth = 1 AND m.ordering_key IN (SELECT key_digest FROM locked))
        AS waits
    FROM moving m
), ins AS (
    INSERT INTO outbox_jobs
        (message_id, queue, job_name, payload, attempts, max_attempts, available_at,
         created_at, priority, trace_context, ordering_key)
    SELECT k.message_id, k.queue, k.job_name, k.payload, 0, k.max_attempts,
        coalesce(k.available_at, clock.now_ms)
          + CASE WHEN t.waits THEN {blocked_offset_ms} ELSE 0 END,
        clock.now_ms, k.priority, k.trace_context, k.ordering_key
    FROM checked k CROSS JOIN clock LEFT JOIN turns t ON t.id = k.id
    WHERE k.reason IS NULL AND (k.ordering_key IS NULL OR t.id IS NOT NULL)
    ORDER BY k.id
    RETURNING trace_context
), moved AS (
    -- By physical address: the rows are locked by this statement and not yet changed,
    -- so their ctid is stable, and a TID join fetches each one directly whatever the
    -- statistics say. (A join on id picked a hash join over the whole table, and
    -- "id = ANY(ARRAY(...))" a per-row rescan when stats said nothing was pending.)
    DELETE FROM outbox_messages m
    USING checked k
    WHERE m.ctid = k.row_ctid AND k.reason IS NULL
      AND (k.ordering_key IS NULL OR k.id IN (SELECT id FROM turns))
    RETURNING m.message_id
), quarantined AS (
    UPDATE outbox_messages m SET
        state = 'failed', failed_at = clock.now_ms, failure_reason = k.reason
    FROM checked k, clock
    WHERE m.ctid = k.row_ctid AND k.reason IS NOT NULL
    RETURNING m.message_id, k.reason
)
SELECT
    (SELECT count(*) FROM checked),
    (SELECT count(*) FROM ins),
    (SELECT array_agg(message_id ORDER BY message_id) FROM quarantined),
    (SELECT array_agg(reason ORDER BY message_id) FROM quarantined),
    (SELECT count(*) FROM (SELECT pg_notify('outbox_jobs', '') FROM ins
                           WHERE :notify LIMIT 1) AS woken),
    (SELECT count(*) FROM moved),
    (SELECT array_agg(trace_context) FROM ins WHERE trace_context IS NOT NULL);

-- name: relay_claim_checked
-- A broker target's claim: the oldest pending rows, locked, with every column the
-- message needs and the reason each fails verification (NULL: valid). The payload
-- leaves the database only for the broker.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, ordering_key, {fragment:intent_reason} AS reason, trace_context
FROM outbox_messages
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size
FOR UPDATE SKIP LOCKED;

-- name: relay_claim_rows
-- The Python verifier's claim: the oldest pending rows, locked, with every column the
-- fingerprint covers.
SELECT id, message_id, fingerprint, job_name, queue, payload, max_attempts, available_at,
    priority, trace_context, ordering_key
FROM outbox_messages
WHERE state = 'pending'
ORDER BY id
LIMIT :batch_size
FOR UPDATE SKIP LOCKED;

-- name: relay_insert_jobs
-- The verified rows of a batch into the queue, in id order, in one statement.
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at,
     priority, trace_context, ordering_key)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
    coalesce(available_at, clock.now_ms), clock.now_ms, priority, trace_context, ordering_key
FROM outbox_messages,
    (SELECT {now_ms} AS now_ms) AS clock
WHERE id = ANY(:ids) AND state = 'pending'
ORDER BY id;

-- name: relay_delete_moved
-- The handed-off rows leave the outbox (their key rows stay in outbox_keys).
DELETE FROM outbox_messages
WHERE id = ANY(:ids) AND state = 'pending';

-- name: relay_mark_failed
UPDATE outbox_messages
SET state = 'failed', failure_reason = :reason,
    failed_at = {now_ms}
WHERE id = ANY(:ids) AND state = 'pending';

-- name: relay_notify
-- Wakes idle workers when the transaction commits.
SELECT pg_notify('outbox_jobs', '');

-- name: listen_relay
-- Wake-ups for relays: record() notifies at commit.
LISTEN outbox_relay;

-- name: listen_jobs
-- Wake-ups for workers: push() and the relay's handoffs notify at commit.
LISTEN outbox_jobs;
