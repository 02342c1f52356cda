-- Migration 2: the idempotency record moves to outbox_keys; a handed-off intent leaves
-- outbox_messages instead of staying behind as a tombstone.
--
-- Rolling upgrade: code of version 1 keeps running against this schema for a while.
-- Its record() inserts into outbox_messages without writing a key row (column `keyed`
-- stays NULL), so a trigger completes that insert: it writes the key row, and when the
-- key already belongs to another intent it turns the new row into that intent's
-- tombstone (the row v1's lookup reads; a duplicate of a pending row is then ignored by
-- v1's own ON DUPLICATE KEY) instead of letting a second intent in.
-- DDL commits statement by statement here: every step can run again, and the trigger
-- exists before the backfill, so no v1 insert falls between the two.

CREATE TABLE IF NOT EXISTS outbox_keys (
	key_digest VARCHAR(64) NOT NULL,
	message_id VARCHAR(36) NOT NULL,
	fingerprint VARCHAR(64) NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (key_digest)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX IF NOT EXISTS outbox_keys_created ON outbox_keys (created_at);

ALTER TABLE outbox_messages ADD COLUMN IF NOT EXISTS keyed SMALLINT;

CREATE TRIGGER IF NOT EXISTS outbox_v1_record BEFORE INSERT ON outbox_messages
FOR EACH ROW
BEGIN
    DECLARE held_id VARCHAR(36);
    DECLARE held_fp VARCHAR(64);
    DECLARE held_at BIGINT;
    IF NEW.keyed IS NULL THEN
        INSERT IGNORE INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
        VALUES (NEW.key_digest, NEW.message_id, NEW.fingerprint, NEW.created_at);
        SELECT message_id, fingerprint, created_at INTO held_id, held_fp, held_at
        FROM outbox_keys WHERE key_digest = NEW.key_digest;
        IF held_id <> NEW.message_id THEN
            SET NEW.message_id = held_id, NEW.fingerprint = held_fp, NEW.payload = NULL,
                NEW.state = 'published', NEW.created_at = held_at,
                NEW.published_at = held_at, NEW.keyed = 1;
        END IF;
    END IF;
END;

INSERT IGNORE INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT key_digest, message_id, fingerprint, created_at FROM outbox_messages;

DELETE FROM outbox_messages WHERE state = 'published';

DROP INDEX IF EXISTS outbox_messages_state_published ON outbox_messages;
