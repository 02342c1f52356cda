-- What outbox.alembic.downgrade drops beside the tables: the ring storage's own objects
-- (outbox/schemas/postgresql/storage/ring.sql), if the database has them.
DROP FUNCTION IF EXISTS outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT);
DROP FUNCTION IF EXISTS outbox_ring_slot();
DROP TABLE IF EXISTS outbox_queue_ring;
