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
-- MariaDB commits DDL implicitly: each statement is idempotent, so a run cut short is
-- completed by the next.

DROP TRIGGER IF EXISTS outbox_v1_record;

ALTER TABLE outbox_messages DROP INDEX IF EXISTS key_digest;
