-- name: event_keys_recorded
-- Which listener keys of an event (a JSON array of digests) are recorded: a replayed
-- emit records only for the listeners its first emit recorded.
-- By the unique index; a plain read (no lock): nothing here decides a write's outcome
-- that record_many would not decide again under its own locks.
SELECT m.key_digest, m.message_id, m.created_at
FROM JSON_TABLE(:key_digests, '$[*]' COLUMNS (
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$'
)) AS d
JOIN outbox_messages AS m ON m.key_digest = d.key_digest;
