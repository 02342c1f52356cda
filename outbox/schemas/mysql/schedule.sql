-- name: schedule_keys_recorded
-- Which of a schedule's recent tick keys (a JSON array of digests) are recorded, and
-- when: `outbox schedule list` finds an entry's last tick by its key, with no table of
-- its own.
-- By the primary key; a plain read (no lock): nothing here decides a write's outcome
-- that record_many would not decide again under its own locks.
SELECT m.key_digest, m.message_id, m.created_at
FROM JSON_TABLE(:key_digests, '$[*]' COLUMNS (
    key_digest VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$'
)) AS d
JOIN outbox_keys AS m ON m.key_digest = d.key_digest;
