-- Least-privilege roles for outbox on PostgreSQL. Run as the schema owner after
-- `outbox migrate` (which the outbox_migrator role, owning the tables, runs).
CREATE ROLE outbox_migrator NOLOGIN;            -- owns the tables; runs `outbox migrate`
CREATE ROLE outbox_app NOLOGIN;                 -- record() and push() in app transactions
CREATE ROLE outbox_relay NOLOGIN;               -- `outbox relay`
CREATE ROLE outbox_worker NOLOGIN;              -- `outbox worker`
CREATE ROLE outbox_operator NOLOGIN;            -- status / failed / retry / prune / queue admin

GRANT SELECT, INSERT ON outbox_messages TO outbox_app;          -- SELECT: idempotent replay
GRANT INSERT ON outbox_jobs TO outbox_app;                      -- push()
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO outbox_app;

GRANT SELECT, UPDATE ON outbox_messages TO outbox_relay;
GRANT SELECT, INSERT ON outbox_jobs TO outbox_relay;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO outbox_relay;

GRANT SELECT, UPDATE, DELETE ON outbox_jobs TO outbox_worker;
GRANT INSERT ON outbox_failed_jobs TO outbox_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO outbox_worker;

GRANT SELECT, UPDATE, DELETE ON outbox_messages, outbox_jobs, outbox_failed_jobs TO outbox_operator;
GRANT INSERT ON outbox_jobs TO outbox_operator;                  -- queue retry
GRANT SELECT ON outbox_schema_version TO outbox_operator;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO outbox_operator;
