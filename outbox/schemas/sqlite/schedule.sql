-- name: schedule_keys_recorded
-- Which of a schedule's recent tick keys (a JSON array of digests) are recorded, and
-- when: `outbox schedule list` finds an entry's last tick by its key, with no table of
-- its own.
SELECT key_digest, message_id, created_at FROM outbox_keys
WHERE key_digest IN (SELECT value FROM json_each(:key_digests));
