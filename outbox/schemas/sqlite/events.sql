-- name: event_keys_recorded
-- Which listener keys of an event (a JSON array of digests) are recorded: a replayed
-- emit records only for the listeners its first emit recorded.
SELECT key_digest, message_id, created_at FROM outbox_messages
WHERE key_digest IN (SELECT value FROM json_each(:key_digests));
