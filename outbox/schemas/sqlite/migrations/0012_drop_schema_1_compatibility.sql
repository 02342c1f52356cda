-- Migration "drop schema 1 compatibility": the contract step of the upgrade that
-- migration "intents move keys stay" began. It drops what only code of schema version 1
-- needed during the rolling-upgrade window:
--
-- - the trigger outbox_v1_record, which completed a version-1 insert into
--   outbox_messages (no key row, `keyed` NULL) and turned a duplicate into a tombstone;
-- - the unique index on outbox_messages.key_digest: the key row's primary key in
--   outbox_keys already guards a key's uniqueness (every writer since version 2 writes
--   the key row first), and no current statement looks intents up by key_digest.
--
-- `outbox migrate` holds this step back while rows written by version-1 code have
-- appeared recently (outbox.db.migrate.schema_1_writers): after it, a version-1
-- producer could record a second intent for a key, and its replays would not find
-- the first. Every other column and index of the tables is read by a current statement
-- (`keyed` is still written by the releases since version 2, so it stays).
--
-- SQLite cannot drop a table constraint, so outbox_messages is rebuilt without it, in
-- this migration's transaction: same columns, rows, ids and indexes. Its AUTOINCREMENT
-- counter is carried over, so an id once used is never handed out again (every fenced
-- update relies on that). The contract step comes last: the rebuilt table lists every
-- column the steps before it added (trace_context: migration "trace context";
-- ordering_key and its index: migration "ordering keys"), and a
-- step that adds a column to outbox_messages goes before this one, never after it,
-- since this step is held back while version-1 code runs and this release needs it.

DROP TRIGGER IF EXISTS outbox_v1_record;

CREATE TABLE outbox_messages_contract (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	message_id VARCHAR(36) NOT NULL,
	key_digest VARCHAR(64) NOT NULL,
	fingerprint VARCHAR(64) NOT NULL,
	job_name VARCHAR(200) NOT NULL,
	queue VARCHAR(200) NOT NULL,
	payload TEXT,
	max_attempts INTEGER,
	available_at BIGINT,
	state VARCHAR(16) DEFAULT 'pending' NOT NULL,
	created_at BIGINT NOT NULL,
	published_at BIGINT,
	failed_at BIGINT,
	failure_reason VARCHAR(64),
	keyed SMALLINT,
	priority SMALLINT NOT NULL DEFAULT 0,
	trace_context VARCHAR(600),
	ordering_key VARCHAR(64),
	UNIQUE (message_id)
);

INSERT INTO outbox_messages_contract
    (id, message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
     available_at, state, created_at, published_at, failed_at, failure_reason, keyed,
     priority, trace_context, ordering_key)
SELECT id, message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
    available_at, state, created_at, published_at, failed_at, failure_reason, keyed,
    priority, trace_context, ordering_key
FROM outbox_messages ORDER BY id;

DELETE FROM sqlite_sequence WHERE name = 'outbox_messages_contract';

INSERT INTO sqlite_sequence (name, seq)
SELECT 'outbox_messages_contract', max(seq) FROM (
    SELECT seq FROM sqlite_sequence WHERE name = 'outbox_messages'
    UNION ALL SELECT max(id) FROM outbox_messages
    UNION ALL SELECT 0
);

DROP TABLE outbox_messages;

ALTER TABLE outbox_messages_contract RENAME TO outbox_messages;

CREATE INDEX IF NOT EXISTS outbox_messages_pending ON outbox_messages (id) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS outbox_messages_failed ON outbox_messages (id) WHERE state = 'failed';

CREATE INDEX IF NOT EXISTS outbox_messages_not_pending
    ON outbox_messages (state, published_at) WHERE state <> 'pending';

CREATE INDEX IF NOT EXISTS outbox_messages_ordering
    ON outbox_messages (ordering_key, id) WHERE ordering_key IS NOT NULL;
