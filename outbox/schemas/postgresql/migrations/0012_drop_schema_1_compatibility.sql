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

DROP TRIGGER IF EXISTS outbox_v1_record ON outbox_messages;

-- The function goes too when this role may drop it. A migrator that owns the tables
-- (ops/sql/postgresql-grants.sql) but not the function, which whoever ran migration 2
-- created, leaves it behind: nothing calls it once the trigger is gone.
DO $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_proc
        WHERE proname = 'outbox_v1_record' AND pronamespace = current_schema()::regnamespace
            AND pg_has_role(current_user, proowner, 'USAGE')
    ) THEN
        DROP FUNCTION outbox_v1_record();
    END IF;
END
$$;

ALTER TABLE outbox_messages DROP CONSTRAINT IF EXISTS outbox_messages_key_digest_key;
