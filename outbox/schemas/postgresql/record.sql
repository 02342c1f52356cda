-- name: record_insert
-- One intent and its key row in one statement: the key row is written first and the
-- intent only if the key was free, so racing producers serialise on outbox_keys' primary
-- key. No row back when the key already exists (then record_lookup decides).
WITH k AS (
    INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, message_id, created_at
)
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
SELECT k.message_id, k.key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
    :available_at, 'pending', k.created_at, 1, :priority, :trace_context, :ordering_key
FROM k
RETURNING message_id;

-- name: record_insert_notify
-- As record_insert, plus a payload-less NOTIFY that PostgreSQL delivers only on commit.
WITH k AS (
    INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    VALUES (:key_digest, :message_id, :fingerprint, {now_ms})
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, message_id, created_at
), ins AS (
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
         available_at, state, created_at, keyed, priority, trace_context, ordering_key)
    SELECT k.message_id, k.key_digest, :fingerprint, :job_name, :queue, :payload,
        :max_attempts, :available_at, 'pending', k.created_at, 1, :priority, :trace_context, :ordering_key
    FROM k
    RETURNING message_id
)
SELECT message_id, pg_notify('outbox_relay', '') FROM ins;

-- name: record_lookup
-- The intent that holds the key. Under READ COMMITTED this statement's fresh snapshot
-- sees a racing transaction's row once ON CONFLICT has waited for it to commit.
SELECT message_id, fingerprint FROM outbox_keys WHERE key_digest = :key_digest;

-- name: record_many_insert
-- Up to 1,000 intents and their key rows in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at, priority, trace_context, ordering_key]; intents are inserted in the given order so ids follow it. (JSON, not
-- one array per column: psycopg's text-array dumper escapes every JSON payload with a
-- regex, which cost more than the round trip. jsonb, not json: json re-parses an
-- element for every ->>.) Rows whose key already exists come back missing;
-- record_many_lookup decides for those.
WITH r AS MATERIALIZED (
    SELECT e.value AS v, e.ord
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS e (value, ord)
), k AS (
    INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    SELECT r.v ->> 1, r.v ->> 0, r.v ->> 2, {now_ms} FROM r
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, created_at
)
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, keyed, priority, trace_context, ordering_key)
SELECT r.v ->> 0, k.key_digest, r.v ->> 2, r.v ->> 3, r.v ->> 4, r.v ->> 5,
       CAST(r.v ->> 6 AS integer), CAST(r.v ->> 7 AS bigint), 'pending', k.created_at, 1,
       CAST(r.v ->> 8 AS smallint), r.v ->> 9, r.v ->> 10
FROM r JOIN k ON k.key_digest = r.v ->> 1
ORDER BY r.ord
RETURNING key_digest, message_id, fingerprint;

-- name: record_many_insert_notify
-- As record_many_insert, plus one payload-less NOTIFY per statement (not per row): the
-- uncorrelated scalar subquery is an InitPlan, evaluated once.
WITH r AS MATERIALIZED (
    SELECT e.value AS v, e.ord
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS e (value, ord)
), k AS (
    INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    SELECT r.v ->> 1, r.v ->> 0, r.v ->> 2, {now_ms} FROM r
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, created_at
), ins AS (
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
         available_at, state, created_at, keyed, priority, trace_context, ordering_key)
    SELECT r.v ->> 0, k.key_digest, r.v ->> 2, r.v ->> 3, r.v ->> 4, r.v ->> 5,
           CAST(r.v ->> 6 AS integer), CAST(r.v ->> 7 AS bigint), 'pending', k.created_at, 1,
           CAST(r.v ->> 8 AS smallint), r.v ->> 9, r.v ->> 10
    FROM r JOIN k ON k.key_digest = r.v ->> 1
    ORDER BY r.ord
    RETURNING key_digest, message_id, fingerprint
)
SELECT key_digest, message_id, fingerprint FROM ins
WHERE (SELECT count(*) FROM pg_notify('outbox_relay', '')) = 1;

-- name: record_many_lookup
-- The key rows (a JSON array of digests) record_many_insert did not insert. Under READ
-- COMMITTED this statement's fresh snapshot sees a racing transaction's committed row.
SELECT key_digest, message_id, fingerprint FROM outbox_keys
WHERE key_digest IN (SELECT json_array_elements_text(CAST(:key_digests AS json)));
