-- Least-privilege accounts for outbox on MariaDB; replace `appdb` and the passwords.
CREATE USER IF NOT EXISTS 'outbox_app'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT, INSERT, UPDATE ON appdb.outbox_messages TO 'outbox_app'@'%';  -- UPDATE: the no-op ON DUPLICATE KEY
GRANT INSERT ON appdb.outbox_jobs TO 'outbox_app'@'%';

CREATE USER IF NOT EXISTS 'outbox_relay'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT, UPDATE ON appdb.outbox_messages TO 'outbox_relay'@'%';
GRANT SELECT, INSERT ON appdb.outbox_jobs TO 'outbox_relay'@'%';

CREATE USER IF NOT EXISTS 'outbox_worker'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT, UPDATE, DELETE ON appdb.outbox_jobs TO 'outbox_worker'@'%';
GRANT INSERT ON appdb.outbox_failed_jobs TO 'outbox_worker'@'%';

CREATE USER IF NOT EXISTS 'outbox_operator'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT, INSERT, UPDATE, DELETE ON appdb.outbox_messages TO 'outbox_operator'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON appdb.outbox_jobs TO 'outbox_operator'@'%';
GRANT SELECT, DELETE ON appdb.outbox_failed_jobs TO 'outbox_operator'@'%';
GRANT SELECT ON appdb.outbox_schema_version TO 'outbox_operator'@'%';

-- The migrator creates tables and takes the GET_LOCK named 'outbox_migrate'.
CREATE USER IF NOT EXISTS 'outbox_migrator'@'%' IDENTIFIED BY 'change-me';
GRANT CREATE, ALTER, INDEX, SELECT, INSERT ON appdb.* TO 'outbox_migrator'@'%';
