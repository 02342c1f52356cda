-- Migration "refuse schema 1 writers": after the contract step, code of schema version 1
-- started by mistake must fail loudly on every backend. On PostgreSQL and SQLite its
-- record() already does (its ON CONFLICT names the unique index the contract step
-- dropped). On MariaDB its INSERT ... ON DUPLICATE KEY UPDATE found no unique key any
-- more and wrote a second intent for a key it had recorded, with no error.
--
-- Every writer since version 2 sets `keyed`; version 1 leaves it NULL. A CHECK
-- constraint (enforced by MariaDB whatever the sql_mode) refuses such a row, so the
-- version-1 statement fails and its transaction writes nothing. Rows version 1 wrote
-- before the contract step (kept, still pending) get `keyed` 0 first: written without
-- a key row. Checking one column of the inserted row costs a writer nothing measurable.
--
-- MariaDB commits DDL implicitly: each statement is idempotent, so a run cut short is
-- completed by the next.

UPDATE outbox_messages SET keyed = 0 WHERE keyed IS NULL;

ALTER TABLE outbox_messages DROP CONSTRAINT IF EXISTS outbox_schema_1_writer_refused;

ALTER TABLE outbox_messages ADD CONSTRAINT outbox_schema_1_writer_refused
    CHECK (keyed IS NOT NULL);
