-- Migration 2: the idempotency record moves to outbox_keys; a handed-off intent leaves
-- outbox_messages instead of staying behind as a tombstone.
--
-- Rolling upgrade: code of version 1 keeps running against this schema for a while.
-- Its record() inserts into outbox_messages without writing a key row (column `keyed`
-- stays NULL), so a trigger completes that insert: it writes the key row, and when the
-- key already belongs to another intent it puts that intent's tombstone back (the row
-- v1's lookup reads) and drops the new row (RAISE(IGNORE)) instead of letting a second
-- intent in. Version 2 writers set `keyed`, so the trigger's WHEN clause skips them.

CREATE TABLE IF NOT EXISTS outbox_keys (
	key_digest VARCHAR(64) NOT NULL,
	message_id VARCHAR(36) NOT NULL,
	fingerprint VARCHAR(64) NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (key_digest)
);

CREATE INDEX IF NOT EXISTS outbox_keys_created ON outbox_keys (created_at);

ALTER TABLE outbox_messages ADD COLUMN keyed SMALLINT;

CREATE TRIGGER IF NOT EXISTS outbox_v1_record BEFORE INSERT ON outbox_messages
WHEN NEW.keyed IS NULL
BEGIN
    INSERT OR IGNORE INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
    VALUES (NEW.key_digest, NEW.message_id, NEW.fingerprint, NEW.created_at);
    INSERT OR IGNORE INTO outbox_messages
        (message_id, key_digest, fingerprint, job_name, queue, payload, state, created_at,
         published_at, keyed)
    SELECT k.message_id, k.key_digest, k.fingerprint, NEW.job_name, NEW.queue, NULL,
        'published', k.created_at, k.created_at, 1
    FROM outbox_keys AS k
    WHERE k.key_digest = NEW.key_digest AND k.message_id <> NEW.message_id;
    SELECT RAISE(IGNORE) FROM outbox_keys AS k
    WHERE k.key_digest = NEW.key_digest AND k.message_id <> NEW.message_id;
END;

INSERT OR IGNORE INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT key_digest, message_id, fingerprint, created_at FROM outbox_messages;

DELETE FROM outbox_messages WHERE state = 'published';

DROP INDEX IF EXISTS outbox_messages_published;
