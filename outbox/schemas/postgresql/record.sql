-- name: record_insert
-- One intent; no row back when the key already exists (then record_lookup decides).
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
VALUES
    (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
     :available_at, 'pending', {now_ms})
ON CONFLICT (key_digest) DO NOTHING
RETURNING message_id;

-- name: record_insert_notify
-- As record_insert, plus a payload-less NOTIFY that PostgreSQL delivers only on commit.
WITH ins AS (
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
         available_at, state, created_at)
    VALUES
        (:message_id, :key_digest, :fingerprint, :job_name, :queue, :payload, :max_attempts,
         :available_at, 'pending', {now_ms})
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING message_id
)
SELECT message_id, pg_notify('outbox_relay', '') FROM ins;

-- name: record_lookup
-- The row that holds the key. Under READ COMMITTED this statement's fresh snapshot
-- sees a racing transaction's row once ON CONFLICT has waited for it to commit.
SELECT message_id, fingerprint FROM outbox_messages WHERE key_digest = :key_digest;

-- name: record_many_insert
-- Up to 1,000 intents in one statement from a JSON array of rows
-- [message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
-- available_at], in the given order so ids follow it. (JSON, not one array per column:
-- psycopg's text-array dumper escapes every JSON payload with a regex, which cost more
-- than the round trip. jsonb, not json: json re-parses an element for every ->>, which
-- made the same batch 1.4x slower.) Rows whose key already exists come back missing;
-- record_many_lookup decides for those.
INSERT INTO outbox_messages
    (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at)
SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, r.value ->> 4,
       r.value ->> 5, CAST(r.value ->> 6 AS integer), CAST(r.value ->> 7 AS bigint),
       'pending', {now_ms}
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (value, ord)
ORDER BY r.ord
ON CONFLICT (key_digest) DO NOTHING
RETURNING key_digest, message_id;

-- name: record_many_insert_notify
-- As record_many_insert, plus one payload-less NOTIFY per statement (not per row): the
-- uncorrelated scalar subquery is an InitPlan, evaluated once.
WITH ins AS (
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
         available_at, state, created_at)
    SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, r.value ->> 4,
           r.value ->> 5, CAST(r.value ->> 6 AS integer), CAST(r.value ->> 7 AS bigint),
           'pending', {now_ms}
    FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r (value, ord)
    ORDER BY r.ord
    ON CONFLICT (key_digest) DO NOTHING
    RETURNING key_digest, message_id
)
SELECT key_digest, message_id FROM ins
WHERE (SELECT count(*) FROM pg_notify('outbox_relay', '')) = 1;

-- name: record_many_lookup
-- The rows that hold the keys (a JSON array of digests) record_many_insert did not
-- insert. Under READ COMMITTED this statement's fresh snapshot sees a racing
-- transaction's committed row.
SELECT key_digest, message_id, fingerprint FROM outbox_messages
WHERE key_digest IN (SELECT json_array_elements_text(CAST(:key_digests AS json)));
