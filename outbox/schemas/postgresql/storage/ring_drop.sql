-- What outbox.alembic.downgrade drops beside the tables: the ring storage's own objects
-- (outbox/schemas/postgresql/storage/ring.sql), if the database has them. Dropping
-- outbox_jobs dropped the attached slot; the spare slots are tables of their own.
DROP FUNCTION IF EXISTS outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT);
DROP FUNCTION IF EXISTS outbox_ring_spares(BOOLEAN);
DROP FUNCTION IF EXISTS outbox_ring_slot();
DROP TABLE IF EXISTS outbox_jobs_ring_0, outbox_jobs_ring_1;
DROP TABLE IF EXISTS outbox_queue_ring;
