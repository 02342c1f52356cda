-- The ring storage for outbox_jobs (ADR 5, docs/explanation/adr/0005-queue-ring-storage.md):
-- the table becomes a parent partitioned by LIST (slot) over outbox_queue_ring.slots
-- slot tables, of which only the current one is attached: new jobs go to it (the
-- column's default: a constant, which each rotation sets, so an insert pays no function
-- call per row) and every statement on outbox_jobs reads it and nothing else: the
-- planner never meets an empty slot, whose statistics would make a sequential scan of
-- it the cheapest plan (and a plan cached then would scan it once it fills).
-- outbox_ring_rotate() attaches the next slot, moves every row to it, detaches the slot
-- left and TRUNCATEs it, so the row versions dead since the oldest snapshot go with the
-- file instead of waiting for VACUUM. Applied in one transaction under the migration
-- lock (outbox.db.migrate), after the numbered migrations: every column and index the
-- heap has then is carried over as it is. A later migration runs with the spare slots
-- attached (outbox_ring_spares), so its columns and indexes reach every slot.

CREATE TABLE outbox_queue_ring (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    slot SMALLINT NOT NULL,
    slots SMALLINT NOT NULL CHECK (slots >= 2),
    rotated_at BIGINT NOT NULL,
    rotations BIGINT NOT NULL DEFAULT 0
);

INSERT INTO outbox_queue_ring (id, slot, slots, rotated_at)
VALUES (1, 0, 2, CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT));

LOCK TABLE outbox_jobs IN ACCESS EXCLUSIVE MODE;

-- The id stays an identity column (no role needs sequence privileges), going on from
-- where the heap's left off.
CREATE TABLE outbox_jobs_ring (
    LIKE outbox_jobs INCLUDING DEFAULTS INCLUDING IDENTITY,
    slot SMALLINT NOT NULL DEFAULT 0
) PARTITION BY LIST (slot);

SELECT setval(CAST(pg_get_serial_sequence('outbox_jobs_ring', 'id') AS regclass), GREATEST(
    COALESCE((SELECT max(id) FROM outbox_jobs), 0),
    COALESCE(pg_sequence_last_value(CAST(pg_get_serial_sequence('outbox_jobs', 'id') AS regclass)), 0),
    1));

-- The partitions, with the heap's storage parameters (fillfactor, autovacuum), its
-- keys (the partition key joins each: a partitioned table's unique index must hold it;
-- ids come from one sequence and moves keep them, so an id is still in one row) and its
-- other indexes, as they are defined now.
DO $$
DECLARE
    opts TEXT := (SELECT array_to_string(reloptions, ', ') FROM pg_class
                  WHERE oid = CAST('outbox_jobs' AS regclass));
    r RECORD;
    n INTEGER := (SELECT slots FROM outbox_queue_ring WHERE id = 1);
BEGIN
    FOR s IN 0 .. n - 1 LOOP
        EXECUTE format('CREATE TABLE outbox_jobs_ring_%s PARTITION OF outbox_jobs_ring'
                       ' FOR VALUES IN (%s)%s', s, s,
                       CASE WHEN opts IS NULL THEN '' ELSE ' WITH (' || opts || ')' END);
    END LOOP;
    ALTER TABLE outbox_jobs_ring ADD CONSTRAINT outbox_jobs_ring_pkey PRIMARY KEY (id, slot);
    ALTER TABLE outbox_jobs_ring ADD CONSTRAINT outbox_jobs_ring_message_id_key
        UNIQUE (message_id, slot);
    FOR r IN
        SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = CAST('outbox_jobs' AS regclass)
          AND NOT i.indisprimary AND NOT i.indisunique
    LOOP
        EXECUTE regexp_replace(r.def, '^CREATE INDEX (\S+) ON \S+ ',
                               'CREATE INDEX \1_ring ON outbox_jobs_ring ');
    END LOOP;
END $$;

INSERT INTO outbox_jobs_ring SELECT j.*, 0 FROM outbox_jobs AS j;

-- The old names back, once the heap is gone.
DO $$
DECLARE
    names TEXT[] := ARRAY(
        SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = CAST('outbox_jobs' AS regclass)
          AND NOT i.indisprimary AND NOT i.indisunique);
    name TEXT;
BEGIN
    DROP TABLE outbox_jobs;
    ALTER TABLE outbox_jobs_ring RENAME TO outbox_jobs;
    ALTER TABLE outbox_jobs RENAME CONSTRAINT outbox_jobs_ring_pkey TO outbox_jobs_pkey;
    ALTER TABLE outbox_jobs RENAME CONSTRAINT outbox_jobs_ring_message_id_key
        TO outbox_jobs_message_id_key;
    FOREACH name IN ARRAY names LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', name || '_ring', name);
    END LOOP;
END $$;

-- Each slot's copy of an index named after it: outbox_jobs_claim_ring_0 on
-- outbox_jobs_ring_0 (plans read as the heap's, less the suffix: outbox.db.plans).
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN
        SELECT child.relname AS child, parent.relname AS parent, part.relname AS part
        FROM pg_index pi
        JOIN pg_class parent ON parent.oid = pi.indexrelid
        JOIN pg_inherits inh ON inh.inhparent = pi.indexrelid
        JOIN pg_class child ON child.oid = inh.inhrelid
        JOIN pg_index ci ON ci.indexrelid = inh.inhrelid
        JOIN pg_class part ON part.oid = ci.indrelid
        WHERE pi.indrelid = CAST('outbox_jobs' AS regclass)
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.child,
                       r.parent || substring(r.part FROM '_ring_[0-9]+$'));
    END LOOP;
END $$;

-- The spare slots attached (attach) or detached (not attach): every slot but the current
-- one, all empty (a rotation detaches the slot it left only once it has moved every row
-- out, and truncates it). outbox.db.migrate attaches them before a numbered migration
-- and detaches them after it, so an ALTER TABLE outbox_jobs reaches them as it reaches
-- the current slot. Locks outbox_jobs first (a rotation, which locks the ring's row and
-- then the table, waits for it or skips), then reads which slot is current.
CREATE FUNCTION outbox_ring_spares(attach BOOLEAN) RETURNS VOID LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    ring outbox_queue_ring%ROWTYPE;
    spare REGCLASS;
    attached BOOLEAN;
BEGIN
    LOCK TABLE outbox_jobs IN ACCESS EXCLUSIVE MODE;
    SELECT * INTO ring FROM outbox_queue_ring WHERE id = 1;
    FOR s IN 0 .. ring.slots - 1 LOOP
        CONTINUE WHEN s = ring.slot;
        spare := CAST(format('outbox_jobs_ring_%s', s) AS regclass);
        attached := EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = spare);
        IF attach AND NOT attached THEN
            EXECUTE format('ALTER TABLE outbox_jobs ATTACH PARTITION %s FOR VALUES IN (%s)',
                           spare, s);
        ELSIF attached AND NOT attach THEN
            EXECUTE format('ALTER TABLE outbox_jobs DETACH PARTITION %s', spare);
        END IF;
    END LOOP;
END $$;

SELECT outbox_ring_spares(false);
REVOKE EXECUTE ON FUNCTION outbox_ring_spares(BOOLEAN) FROM PUBLIC;  -- the migrator's alone

-- One rotation, in the caller's transaction (one statement in autocommit): when the
-- current slot is at least every_ms old and holds at least min_dead dead row versions,
-- take ACCESS EXCLUSIVE on the parent and so on the slot, within lock_timeout (no
-- statement on a job is in flight or can start, so none can meet a row this moves, and
-- no producer can route a row to the slot being left); attach the next slot (empty);
-- move every row to it (ids, attempts and leases unchanged: a worker's fence still
-- matches); point the ring and the column's default at it (other sessions see the new
-- default once the rotation commits: the ALTER, the ATTACH and the DETACH invalidate
-- their cached plans); detach the slot left, empty now, and TRUNCATE it. All or
-- nothing: a rotation that is killed, terminated or cut by a restart rolls back whole
-- and the next pass tries again. A busy lock or a slot of more than max_move live rows
-- skips the rotation (the claim stays correct, only not shielded).
-- Answers what it did: rotated, busy (another session rotates), recent, clean,
-- backlog, locked. SECURITY DEFINER, with the migration's search_path: ALTER and
-- TRUNCATE need the tables' owner, and a worker may run as a role that is not
-- (EXECUTE is revoked from PUBLIC: grant it to such a role).
CREATE FUNCTION outbox_ring_rotate(min_dead BIGINT, every_ms BIGINT, max_move INTEGER,
                                   wait TEXT) RETURNS TEXT LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    ring outbox_queue_ring%ROWTYPE;
    cur REGCLASS;
    nxt SMALLINT;
    live BIGINT;
    now_ms BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
BEGIN
    SELECT * INTO ring FROM outbox_queue_ring WHERE id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 'busy';
    END IF;
    IF now_ms - ring.rotated_at < every_ms THEN
        RETURN 'recent';
    END IF;
    cur := CAST(format('outbox_jobs_ring_%s', ring.slot) AS regclass);
    IF pg_stat_get_dead_tuples(cur) < min_dead THEN
        RETURN 'clean';
    END IF;
    IF pg_stat_get_live_tuples(cur) > 2 * max_move THEN
        RETURN 'backlog';
    END IF;
    nxt := (ring.slot + 1) % ring.slots;
    PERFORM set_config('lock_timeout', wait, true);
    BEGIN
        LOCK TABLE outbox_jobs IN ACCESS EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'locked';
    END;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %s) AS l', cur, max_move + 1)
        INTO live;
    IF live > max_move THEN
        RETURN 'backlog';
    END IF;
    BEGIN  -- a reader of the spare slot (pg_dump) holds a lock ATTACH needs
        EXECUTE format('ALTER TABLE outbox_jobs ATTACH PARTITION outbox_jobs_ring_%s'
                       ' FOR VALUES IN (%s)', nxt, nxt);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'locked';
    END;
    UPDATE outbox_jobs SET slot = nxt WHERE slot = ring.slot;
    EXECUTE format('ALTER TABLE ONLY outbox_jobs ALTER COLUMN slot SET DEFAULT %s', nxt);
    UPDATE outbox_queue_ring SET slot = nxt, rotated_at = now_ms, rotations = rotations + 1
    WHERE id = 1;
    EXECUTE format('ALTER TABLE outbox_jobs DETACH PARTITION %s', cur);
    EXECUTE format('TRUNCATE %s', cur);
    RETURN 'rotated';
END $$;

REVOKE EXECUTE ON FUNCTION outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT) FROM PUBLIC;
