-- What outbox.alembic.downgrade drops beside the tables: the ring storage's own objects
-- (outbox/schemas/postgresql/storage/ring.sql), if the database has them. Dropping
-- outbox_jobs dropped the attached slot; a slot a rotation left (detached, waiting for
-- the next pass to drop it) is a table of its own.
DO $$
DECLARE
    t REGCLASS;
BEGIN
    IF to_regproc('outbox_ring_slot_tables') IS NULL THEN
        RETURN;
    END IF;
    FOR t IN SELECT * FROM outbox_ring_slot_tables() LOOP
        EXECUTE format('DROP TABLE %s', t);
    END LOOP;
END $$;
DROP FUNCTION IF EXISTS outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT);
DROP FUNCTION IF EXISTS outbox_ring_new_slot(BIGINT, TEXT[]);
DROP FUNCTION IF EXISTS outbox_ring_slot_tables();
DROP TABLE IF EXISTS outbox_queue_ring;
