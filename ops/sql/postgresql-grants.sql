-- Least-privilege roles for outbox on PostgreSQL.
--
-- Apply it as the database owner (or a superuser), connected to the database that holds
-- the tables, after the first `outbox migrate`, and again after every upgrade (it is
-- idempotent; new tables need their grants):
--
--     outbox migrate
--     psql -d appdb -f ops/sql/postgresql-grants.sql
--
-- The tables are found through search_path, in the schema `outbox migrate` wrote them to.
-- Each role is a NOLOGIN group. Give every process a LOGIN user of its own that joins the
-- group and INHERITs its privileges, e.g.
--
--     CREATE ROLE relay_eu1 LOGIN INHERIT PASSWORD '...' IN ROLE outbox_relay;
--
-- | role            | runs                                                           |
-- | outbox_app      | record() / record_many() / push(), in the application's own transactions |
-- | outbox_relay    | outbox relay                                                   |
-- | outbox_worker   | outbox worker (transactional handlers need grants on your tables too) |
-- | outbox_operator | status, failed, retry, prune, queue jobs/stats/failed/retry/forget/remove/clear/pause/resume/cancel |
-- | outbox_migrator | outbox migrate (owns the tables)                               |
--
-- Column lists are deliberate: RETURNING and the idempotent replay need SELECT only on the
-- columns they read, so the application never reads a payload it did not write. No role
-- needs sequence privileges: the ids are identity columns.
-- tests/ops/test_grants.py applies this file as shipped and runs every part of outbox as
-- its role.

\set ON_ERROR_STOP on

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['outbox_app', 'outbox_relay', 'outbox_worker', 'outbox_operator',
                             'outbox_migrator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    -- USAGE on the tables' schema for everyone; CREATE for the migrator's next migration.
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO outbox_app, outbox_relay, outbox_worker, '
                   'outbox_operator, outbox_migrator', current_schema());
    EXECUTE format('GRANT CREATE ON SCHEMA %I TO outbox_migrator', current_schema());
END
$$;

-- migrator: owns the tables, so later migrations can alter them.
ALTER TABLE outbox_keys OWNER TO outbox_migrator;
ALTER TABLE outbox_messages OWNER TO outbox_migrator;
ALTER TABLE outbox_jobs OWNER TO outbox_migrator;
ALTER TABLE outbox_failed_jobs OWNER TO outbox_migrator;
ALTER TABLE outbox_paused_queues OWNER TO outbox_migrator;
ALTER TABLE outbox_schema_version OWNER TO outbox_migrator;
ALTER TABLE outbox_throughput OWNER TO outbox_migrator;
ALTER TABLE outbox_limits OWNER TO outbox_migrator;
ALTER TABLE outbox_limit_slots OWNER TO outbox_migrator;
ALTER TABLE outbox_limit_starts OWNER TO outbox_migrator;
ALTER TABLE outbox_limit_waits OWNER TO outbox_migrator;
ALTER TABLE outbox_inbox OWNER TO outbox_migrator;
ALTER TABLE outbox_job_results OWNER TO outbox_migrator;
ALTER TABLE outbox_workflows OWNER TO outbox_migrator;
ALTER TABLE outbox_workflow_nodes OWNER TO outbox_migrator;
ALTER TABLE outbox_workflow_edges OWNER TO outbox_migrator;

-- app: writes intents with their key rows, and jobs; reads back only ids, digests,
-- fingerprints and times (RETURNING, the replay lookup in outbox_keys). No payload, no
-- UPDATE, no DELETE. (SELECT on those outbox_messages columns serves a version-1 record()
-- during a rolling upgrade: ON CONFLICT's arbiter and its lookup.)
GRANT INSERT ON outbox_keys TO outbox_app;
GRANT SELECT (key_digest, message_id, fingerprint, created_at) ON outbox_keys TO outbox_app;
GRANT INSERT ON outbox_messages TO outbox_app;
GRANT SELECT (message_id, key_digest, fingerprint) ON outbox_messages TO outbox_app;
GRANT INSERT ON outbox_jobs TO outbox_app;
GRANT SELECT (message_id) ON outbox_jobs TO outbox_app;
-- Workflows (outbox/workflows.py): record() writes the workflow, its nodes and edges.
GRANT INSERT ON outbox_workflows, outbox_workflow_nodes, outbox_workflow_edges TO outbox_app;

-- relay: claims and verifies pending intents, moves them (deletes them here, inserts the
-- queue rows) or quarantines them. Never reads or changes a job afterwards, and never
-- touches the key rows. (UPDATE of payload and published_at serves a version-1 relay
-- during a rolling upgrade, which marks intents published instead.)
GRANT SELECT, DELETE ON outbox_messages TO outbox_relay;
GRANT UPDATE (state, payload, published_at, failed_at, failure_reason)
    ON outbox_messages TO outbox_relay;
GRANT INSERT ON outbox_jobs TO outbox_relay;
-- The one-statement handoff returns the moved jobs' trace contexts (the batch span's
-- links, outbox.tracing): RETURNING needs SELECT on that column, and only on it.
GRANT SELECT (trace_context) ON outbox_jobs TO outbox_relay;
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
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_limits, outbox_limit_slots,
    outbox_limit_starts, outbox_limit_waits TO outbox_worker;
-- The broker inbox (outbox/jetstream/inbox.py): a JetStream worker's transactional jobs.
GRANT SELECT, INSERT ON outbox_inbox TO outbox_worker;
-- Kept job results (outbox/results.py): written with the ack, an old one replaced on a rerun.
GRANT SELECT, INSERT, DELETE ON outbox_job_results TO outbox_worker;
-- Workflows (outbox/db/workflows.py): a node's ack or dead letter moves its dependents on;
-- due ones become jobs, failed ones dead letters; ctx.results reads the parents' results.
GRANT SELECT, UPDATE ON outbox_workflow_nodes TO outbox_worker;
GRANT SELECT ON outbox_workflows, outbox_workflow_edges TO outbox_worker;
GRANT INSERT ON outbox_jobs TO outbox_worker;

-- operator: reads everything; returns quarantined intents to pending (retry, which may
-- re-seal a key's fingerprint), prunes the keys of handed-off intents (and version-1
-- tombstones), the chart's old minutes and idle limit keys, requeues / forgets dead letters, removes and
-- clears jobs, pauses and resumes queues, cancels jobs (a waiting one to the dead
-- letters, a held one flagged). It cannot record an intent or change a job otherwise.
GRANT SELECT ON outbox_keys, outbox_messages, outbox_jobs, outbox_failed_jobs,
    outbox_paused_queues, outbox_schema_version TO outbox_operator;
GRANT UPDATE (cancel_requested_at) ON outbox_jobs TO outbox_operator;
GRANT INSERT, DELETE ON outbox_paused_queues TO outbox_operator;
GRANT INSERT ON outbox_failed_jobs TO outbox_operator;
GRANT UPDATE (fingerprint), DELETE ON outbox_keys TO outbox_operator;
GRANT UPDATE (state, payload, fingerprint, failed_at, failure_reason)
    ON outbox_messages TO outbox_operator;
GRANT DELETE ON outbox_messages TO outbox_operator;
GRANT INSERT, DELETE ON outbox_jobs TO outbox_operator;
GRANT DELETE ON outbox_failed_jobs TO outbox_operator;
GRANT SELECT, DELETE ON outbox_throughput TO outbox_operator;
GRANT SELECT, DELETE ON outbox_limits, outbox_limit_slots, outbox_limit_starts,
    outbox_limit_waits TO outbox_operator;
GRANT SELECT, DELETE ON outbox_inbox TO outbox_operator;
GRANT SELECT, DELETE ON outbox_job_results TO outbox_operator;
-- Workflows: show, cancel, the retry of a failed node (re-arms its skipped dependents), prune.
GRANT SELECT, UPDATE, DELETE ON outbox_workflows, outbox_workflow_nodes TO outbox_operator;
GRANT SELECT, DELETE ON outbox_workflow_edges TO outbox_operator;

-- Ordering keys (outbox/queue/ordering.py): whoever puts a keyed job in the queue (push,
-- the relay, `queue retry`) locks the key's row and looks for the key's other jobs;
-- whoever ends one (worker; operator: remove, clear, cancel) locks it, promotes the
-- next job of the key (its available_at) and drops the row when none is left.
ALTER TABLE outbox_ordering_keys OWNER TO outbox_migrator;
GRANT SELECT, INSERT, UPDATE ON outbox_ordering_keys TO outbox_app, outbox_relay;
GRANT SELECT (id, ordering_key, available_at) ON outbox_jobs TO outbox_app, outbox_relay;
-- ... and for a dead letter that holds the key (dead_letter_holds_key): no payload.
GRANT SELECT (id, ordering_key, ordering_held) ON outbox_failed_jobs
    TO outbox_app, outbox_relay, outbox_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_ordering_keys TO outbox_worker, outbox_operator;
-- A keyed job that enters behind another of its key waits: its available_at is shifted
-- (outbox.job.BLOCKED_OFFSET_MS) right after the insert, by whoever inserted it.
GRANT UPDATE (available_at) ON outbox_jobs TO outbox_app, outbox_relay, outbox_operator;

-- The ring storage (docs/explanation/adr/0005-queue-ring-storage.md): outbox_jobs is a
-- parent partitioned by slot, with only the current slot attached. Statements through
-- the parent need only the parent's grants above; the migrator owns the slot tables
-- (the current one, and the one the last rotation left until the next pass drops it),
-- the ring's row, and the rotation's functions: the rotation runs as their owner
-- (SECURITY DEFINER: it creates, attaches, detaches and drops slot tables, which the
-- migrator then owns). The worker rotates; the operator reads the ring's state. Skipped
-- on the plain table (OUTBOX_QUEUE_STORAGE=heap).
DO $$
DECLARE
    t REGCLASS;
BEGIN
    IF to_regclass('outbox_queue_ring') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE outbox_queue_ring OWNER TO outbox_migrator;
    FOR t IN SELECT * FROM outbox_ring_slot_tables() LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO outbox_migrator', t);
    END LOOP;
    ALTER FUNCTION outbox_ring_new_slot(BIGINT, TEXT[]) OWNER TO outbox_migrator;
    ALTER FUNCTION outbox_ring_slot_tables() OWNER TO outbox_migrator;
    ALTER FUNCTION outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT) OWNER TO outbox_migrator;
    GRANT SELECT ON outbox_queue_ring TO outbox_worker, outbox_operator;
    GRANT EXECUTE ON FUNCTION outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT)
        TO outbox_worker;
END
$$;
