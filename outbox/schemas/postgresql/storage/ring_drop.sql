-- What outbox.alembic.downgrade drops beside the tables: the ring storage's own objects
-- (outbox/schemas/postgresql/storage/ring.sql), if the database has them. Dropping
-- outbox_jobs dropped the attached slot; a slot a rotation left (detached, waiting for
-- the next pass to drop it) is a table of its own.
DO $$
DECLARE
    t REGCLASS;
BEGIN
    FOR t IN SELECT c.oid FROM pg_class c
             WHERE c.relname ~ '^outbox_jobs_ring_[0-9]+$' AND c.relkind = 'r'
               AND c.relnamespace = CAST(current_schema() AS regnamespace)
    LOOP
        EXECUTE format('DROP TABLE %s', t);
    END LOOP;
END $$;
DROP FUNCTION IF EXISTS outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT);
DROP FUNCTION IF EXISTS outbox_ring_new_slot(BIGINT, TEXT[]);
DROP TABLE IF EXISTS outbox_queue_ring;
