-- Migration 2: the idempotency record moves to outbox_keys; a handed-off intent leaves
-- outbox_messages instead of staying behind as a tombstone.
--
-- Rolling upgrade: code of version 1 keeps running against this schema for a while.
-- Its record() inserts into outbox_messages without writing a key row (column `keyed`
-- stays NULL), so a trigger completes that insert: it writes the key row, and when the
-- key already belongs to another intent it puts that intent's tombstone back (the row
-- v1's lookup reads) instead of letting a second intent in. Version 2 writers set
-- `keyed`, so the trigger's WHEN clause skips them at no cost.

CREATE TABLE IF NOT EXISTS outbox_keys (
	key_digest VARCHAR(64) NOT NULL,
	message_id VARCHAR(36) NOT NULL,
	fingerprint VARCHAR(64) NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (key_digest)
);

CREATE INDEX IF NOT EXISTS outbox_keys_created ON outbox_keys (created_at);

ALTER TABLE outbox_messages ADD COLUMN IF NOT EXISTS keyed SMALLINT;

CREATE OR REPLACE FUNCTION outbox_v1_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held outbox_keys%ROWTYPE;
BEGIN
    INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    VALUES (NEW.key_digest, NEW.message_id, NEW.fingerprint, NEW.created_at)
    ON CONFLICT (key_digest) DO NOTHING;
    SELECT * INTO held FROM outbox_keys WHERE key_digest = NEW.key_digest;
    IF held.message_id = NEW.message_id THEN
        RETURN NEW;
    END IF;
    INSERT INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, state, created_at,
         published_at, keyed)
    VALUES
        (held.message_id, held.key_digest, held.fingerprint, NEW.job_name, NEW.queue, NULL,
         'published', held.created_at, held.created_at, 1)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_v1_record ON outbox_messages;

CREATE TRIGGER outbox_v1_record BEFORE INSERT ON outbox_messages
FOR EACH ROW WHEN (NEW.keyed IS NULL) EXECUTE FUNCTION outbox_v1_record();

INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT key_digest, message_id, fingerprint, created_at FROM outbox_messages
ON CONFLICT (key_digest) DO NOTHING;

DELETE FROM outbox_messages WHERE state = 'published';

DROP INDEX IF EXISTS outbox_messages_published;
