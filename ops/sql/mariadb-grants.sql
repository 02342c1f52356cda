-- Least-privilege roles for outbox on MariaDB (10.5 or later).
--
-- Apply it as an account allowed to grant, with the database that holds the tables as the
-- default database, after the first `outbox migrate`, and again after every upgrade (it is
-- idempotent; new tables need their grants):
--
--     outbox migrate
--     mariadb appdb < ops/sql/mariadb-grants.sql
--
-- Unqualified names below are that database's tables. Each role is granted to accounts of
-- your own, one per process, as their default role, e.g.
--
--     CREATE USER 'relay_eu1'@'10.0.%' IDENTIFIED BY '...';
--     GRANT outbox_relay TO 'relay_eu1'@'10.0.%';
--     SET DEFAULT ROLE outbox_relay FOR 'relay_eu1'@'10.0.%';
--
-- | role            | runs                                                           |
-- | outbox_app      | record() / record_many() / push(), in the application's own transactions |
-- | outbox_relay    | outbox relay                                                   |
-- | outbox_worker   | outbox worker (transactional handlers need grants on your tables too) |
-- | outbox_operator | status, failed, retry, prune, queue jobs/stats/failed/retry/forget/remove/clear/pause/resume/cancel |
-- | outbox_migrator | outbox migrate                                                 |
--
-- Column lists are deliberate: the idempotent replay reads only ids and fingerprints, so
-- the application never reads a payload it did not write.
-- tests/ops/test_grants.py applies this file as shipped and runs every part of outbox as
-- its role.

CREATE ROLE IF NOT EXISTS outbox_app;
CREATE ROLE IF NOT EXISTS outbox_relay;
CREATE ROLE IF NOT EXISTS outbox_worker;
CREATE ROLE IF NOT EXISTS outbox_operator;
CREATE ROLE IF NOT EXISTS outbox_migrator;

-- migrator: creates and alters the tables, records the version; GET_LOCK needs nothing.
-- Migration 2 also creates a trigger (it runs with the migrator's rights: SQL SECURITY
-- DEFINER) and deletes the old tombstones.
GRANT CREATE, ALTER, INDEX, TRIGGER, SELECT, INSERT, DELETE ON * TO outbox_migrator;

-- app: writes intents with their key rows, and jobs; reads back only ids, digests,
-- fingerprints and times. No payload, no DELETE. A replayed key's INSERT into outbox_keys
-- ends in a no-op "ON DUPLICATE KEY UPDATE", and MariaDB checks UPDATE on every column such
-- an INSERT writes, not only on the one it updates: hence UPDATE on the key rows' columns
-- (they hold no payload; PostgreSQL's role needs none). The grants on outbox_messages'
-- recorded columns serve a version-1 record() during a rolling upgrade, whose INSERT ends
-- the same way there; revoke them once no version-1 producer is left.
GRANT INSERT ON outbox_keys TO outbox_app;
GRANT SELECT (key_digest, message_id, fingerprint, created_at) ON outbox_keys TO outbox_app;
GRANT UPDATE (key_digest, message_id, fingerprint, created_at) ON outbox_keys TO outbox_app;
GRANT INSERT ON outbox_messages TO outbox_app;
GRANT SELECT (id, message_id, key_digest, fingerprint) ON outbox_messages TO outbox_app;
GRANT UPDATE (id, message_id, key_digest, fingerprint, job_name, queue, payload, max_attempts,
              available_at, state, created_at)
    ON outbox_messages TO outbox_app;
GRANT INSERT ON outbox_jobs TO outbox_app;
-- Workflows (outbox/workflows.py): record() writes the workflow, its nodes and edges.
GRANT INSERT ON outbox_workflows TO outbox_app;
GRANT INSERT ON outbox_workflow_nodes TO outbox_app;
GRANT INSERT ON outbox_workflow_edges TO outbox_app;

-- relay: claims and verifies pending intents, moves them (deletes them here, inserts the
-- queue rows) or quarantines them. Never reads or changes a job afterwards, and never
-- touches the key rows. (UPDATE of payload and published_at serves a version-1 relay
-- during a rolling upgrade, which marks intents published instead.)
GRANT SELECT, DELETE ON outbox_messages TO outbox_relay;
GRANT UPDATE (state, payload, published_at, failed_at, failure_reason)
    ON outbox_messages TO outbox_relay;
GRANT INSERT ON outbox_jobs TO outbox_relay;
GRANT SELECT ON outbox_schema_version TO outbox_relay;

-- worker: claims, renews, releases, snoozes and deletes jobs, and writes dead letters; it
-- reads which queues are paused. It cannot change a job's payload or priority, read dead
-- letters, pause a queue, or touch the outbox.
GRANT SELECT, DELETE ON outbox_jobs TO outbox_worker;
GRANT UPDATE (attempts, available_at, reserved_at, reserved_by, lease_expires_at, last_error,
              snoozes)
    ON outbox_jobs TO outbox_worker;
GRANT INSERT ON outbox_failed_jobs TO outbox_worker;
GRANT SELECT ON outbox_paused_queues TO outbox_worker;
GRANT SELECT ON outbox_schema_version TO outbox_worker;
-- The dashboard chart's per-minute counts: each worker adds to rows of its own
-- (outbox/queue/throughput.py); the upsert reads the row it adds to.
GRANT SELECT, INSERT, UPDATE ON outbox_throughput TO outbox_worker;
-- Global concurrency and rate limits (outbox/queue/gate.py): the worker locks a key's
-- row, takes and frees slots, records starts and waits.
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_limits TO outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_limit_slots TO outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_limit_starts TO outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_limit_waits TO outbox_worker;
-- The broker inbox (outbox/jetstream/inbox.py): a JetStream worker's transactional jobs.
GRANT SELECT, INSERT ON outbox_inbox TO outbox_worker;
-- Kept job results (outbox/results.py): written with the ack, an old one replaced on a rerun.
GRANT SELECT, INSERT, DELETE ON outbox_job_results TO outbox_worker;
-- Workflows (outbox/db/workflows.py): a node's ack or dead letter moves its dependents on;
-- due ones become jobs, failed ones dead letters; ctx.results reads the parents' results.
GRANT SELECT, UPDATE ON outbox_workflow_nodes TO outbox_worker;
GRANT SELECT ON outbox_workflows TO outbox_worker;
GRANT SELECT ON outbox_workflow_edges TO outbox_worker;
GRANT INSERT ON outbox_jobs TO outbox_worker;

-- operator: reads everything; returns quarantined intents to pending (retry, which may
-- re-seal a key's fingerprint), prunes the keys of handed-off intents (and version-1
-- tombstones), the chart's old minutes and idle limit keys, requeues / forgets dead
-- letters, removes and clears jobs, pauses and resumes queues, cancels jobs (a waiting
-- one to the dead letters, a held one flagged). It cannot record an intent or change a job otherwise.
GRANT SELECT, DELETE ON outbox_keys TO outbox_operator;
GRANT UPDATE (fingerprint) ON outbox_keys TO outbox_operator;
GRANT SELECT, DELETE ON outbox_messages TO outbox_operator;
GRANT UPDATE (state, payload, fingerprint, failed_at, failure_reason)
    ON outbox_messages TO outbox_operator;
GRANT SELECT, INSERT, DELETE ON outbox_jobs TO outbox_operator;
GRANT SELECT, DELETE ON outbox_failed_jobs TO outbox_operator;
GRANT UPDATE (cancel_requested_at) ON outbox_jobs TO outbox_operator;
GRANT SELECT, INSERT, DELETE ON outbox_paused_queues TO outbox_operator;
GRANT INSERT ON outbox_failed_jobs TO outbox_operator;
GRANT SELECT ON outbox_schema_version TO outbox_operator;
GRANT SELECT, DELETE ON outbox_throughput TO outbox_operator;
GRANT SELECT, DELETE ON outbox_limits TO outbox_operator;
GRANT SELECT, DELETE ON outbox_limit_slots TO outbox_operator;
GRANT SELECT, DELETE ON outbox_limit_starts TO outbox_operator;
GRANT SELECT, DELETE ON outbox_limit_waits TO outbox_operator;
GRANT SELECT, DELETE ON outbox_inbox TO outbox_operator;
GRANT SELECT, DELETE ON outbox_job_results TO outbox_operator;
-- Workflows: show, cancel, the retry of a failed node (re-arms its skipped dependents), prune.
GRANT SELECT, UPDATE, DELETE ON outbox_workflows TO outbox_operator;
GRANT SELECT, UPDATE, DELETE ON outbox_workflow_nodes TO outbox_operator;
GRANT SELECT, DELETE ON outbox_workflow_edges TO outbox_operator;

-- Ordering keys (outbox/queue/ordering.py): whoever puts a keyed job in the queue (push,
-- the relay, `queue retry`) locks the key's row and looks for the key's other jobs;
-- whoever ends one (worker; operator: remove, clear, cancel) locks it, promotes the
-- next job of the key (its available_at) and drops the row when none is left.
GRANT SELECT, INSERT, UPDATE ON outbox_ordering_keys TO outbox_app;
GRANT SELECT, INSERT, UPDATE ON outbox_ordering_keys TO outbox_relay;
GRANT SELECT (id, ordering_key, available_at) ON outbox_jobs TO outbox_app;
GRANT SELECT (id, ordering_key, available_at) ON outbox_jobs TO outbox_relay;
-- ... and for a dead letter that holds the key (dead_letter_holds_key): no payload.
GRANT SELECT (id, ordering_key, ordering_held) ON outbox_failed_jobs TO outbox_app;
GRANT SELECT (id, ordering_key, ordering_held) ON outbox_failed_jobs TO outbox_relay;
GRANT SELECT (id, ordering_key, ordering_held) ON outbox_failed_jobs TO outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_ordering_keys TO outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_ordering_keys TO outbox_operator;
-- A keyed job that enters behind another of its key waits: its available_at is shifted
-- (outbox.job.BLOCKED_OFFSET_MS) right after the insert, by whoever inserted it.
GRANT UPDATE (available_at) ON outbox_jobs TO outbox_app;
GRANT UPDATE (available_at) ON outbox_jobs TO outbox_relay;
GRANT UPDATE (available_at) ON outbox_jobs TO outbox_operator;
