-- The ring storage for outbox_jobs (ADR 5, docs/explanation/adr/0005-queue-ring-storage.md):
-- the table becomes a parent partitioned by LIST (slot) with one partition attached, the
-- current slot, as its DEFAULT partition: every row lands there whatever its slot
-- column says (always 0: the column is the partition key and nothing else), and every
-- statement on outbox_jobs reads it and nothing else, so the planner never meets an
-- empty slot, whose statistics would make a sequential scan of it the cheapest plan.
-- outbox_ring_rotate() builds a new slot table, moves every row into it, detaches the
-- slot left and attaches the new one; the next pass drops the slot left, and with it the
-- row versions dead since the oldest snapshot, instead of waiting for VACUUM. Each slot
-- is a table of its own name (outbox_jobs_ring_<n>, n counting rotations), made from the
-- parent's definition at rotation time, so a later migration's column or index reaches
-- every slot to come, and no catalog row is ever rewritten under a reused key: the dead
-- catalog versions a held horizon keeps belong to dropped tables and lie in no lookup's
-- path. Applied in one transaction under the migration lock (outbox.db.migrate), after
-- the numbered migrations: every column and index the heap has then is carried over.

CREATE TABLE outbox_queue_ring (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    slot BIGINT NOT NULL,          -- the current slot: outbox_jobs_ring_<slot>
    left_from BIGINT NOT NULL,     -- the oldest slot that may not be dropped yet
    rotated_at BIGINT NOT NULL,
    rotations BIGINT NOT NULL DEFAULT 0
);

INSERT INTO outbox_queue_ring (id, slot, left_from, rotated_at)
VALUES (1, 0, 0, CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT));

-- A new slot table, made from the parent's definition as it is at the time: its columns
-- and CHECK constraints, the storage parameters given (the current slot's, at a
-- rotation), and each of the parent's keys and indexes under the parent's name and the
-- slot's suffix (outbox_jobs_claim_ring_7 on outbox_jobs_ring_7: plans read as the
-- heap's, less the suffix, outbox.db.plans), so that ATTACH finds every index it needs
-- already built. Not attached.
CREATE FUNCTION outbox_ring_new_slot(n BIGINT, opts TEXT[]) RETURNS REGCLASS
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    tbl TEXT := format('outbox_jobs_ring_%s', n);
    r RECORD;
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE outbox_jobs INCLUDING CONSTRAINTS)%s', tbl,
                   CASE WHEN opts IS NULL THEN ''
                        ELSE ' WITH (' || array_to_string(opts, ', ') || ')' END);
    FOR r IN
        SELECT pg_get_indexdef(i.indexrelid) AS def, k.conname AS con,
               pg_get_constraintdef(k.oid) AS condef
        FROM pg_index i
        LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid
                                 AND k.conrelid = CAST('outbox_jobs' AS regclass)
        WHERE i.indrelid = CAST('outbox_jobs' AS regclass)
    LOOP
        IF r.con IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', tbl, r.con || '_ring_' || n,
                           r.condef);
        ELSE
            EXECUTE regexp_replace(r.def, '^CREATE (UNIQUE )?INDEX (\S+) ON ONLY \S+ ',
                                   format('CREATE \1INDEX \2_ring_%s ON %I ', n, tbl));
        END IF;
    END LOOP;
    RETURN CAST(tbl AS regclass);
END $$;

REVOKE EXECUTE ON FUNCTION outbox_ring_new_slot(BIGINT, TEXT[]) FROM PUBLIC;

LOCK TABLE outbox_jobs IN ACCESS EXCLUSIVE MODE;

-- The id stays an identity column (no role needs sequence privileges), going on from
-- where the heap's left off.
CREATE TABLE outbox_jobs_ring (
    LIKE outbox_jobs INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS,
    slot SMALLINT NOT NULL DEFAULT 0
) PARTITION BY LIST (slot);

SELECT setval(CAST(pg_get_serial_sequence('outbox_jobs_ring', 'id') AS regclass), GREATEST(
    COALESCE((SELECT max(id) FROM outbox_jobs), 0),
    COALESCE(pg_sequence_last_value(CAST(pg_get_serial_sequence('outbox_jobs', 'id') AS regclass)), 0),
    1));

-- The parent's keys (the partition key joins each: a partitioned table's unique index
-- must hold it; ids come from one sequence and moves keep them, so an id is still in
-- one row) and its other indexes, as the heap defines them now; then the heap steps
-- aside (its indexes too, to leave their names), the parent takes its names, the first
-- slot is made with the heap's storage parameters (fillfactor, autovacuum), filled with
-- its rows and attached, and the heap is dropped.
DO $$
DECLARE
    r RECORD;
    opts TEXT[] := (SELECT reloptions FROM pg_class WHERE oid = CAST('outbox_jobs' AS regclass));
    name TEXT;
BEGIN
    ALTER TABLE outbox_jobs_ring ADD CONSTRAINT outbox_jobs_ring_pkey PRIMARY KEY (id, slot);
    ALTER TABLE outbox_jobs_ring ADD CONSTRAINT outbox_jobs_ring_message_id_key
        UNIQUE (message_id, slot);
    FOR r IN
        SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = CAST('outbox_jobs' AS regclass)
          AND NOT i.indisprimary AND NOT i.indisunique
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.name, r.name || '_heap');
        EXECUTE regexp_replace(r.def, '^CREATE INDEX (\S+) ON \S+ ',
                               'CREATE INDEX \1 ON outbox_jobs_ring ');
    END LOOP;
    ALTER TABLE outbox_jobs RENAME TO outbox_jobs_heap;
    ALTER TABLE outbox_jobs_ring RENAME TO outbox_jobs;
    ALTER TABLE outbox_jobs_heap RENAME CONSTRAINT outbox_jobs_pkey TO outbox_jobs_heap_pkey;
    ALTER TABLE outbox_jobs_heap RENAME CONSTRAINT outbox_jobs_message_id_key
        TO outbox_jobs_heap_message_id_key;
    ALTER TABLE outbox_jobs RENAME CONSTRAINT outbox_jobs_ring_pkey TO outbox_jobs_pkey;
    ALTER TABLE outbox_jobs RENAME CONSTRAINT outbox_jobs_ring_message_id_key
        TO outbox_jobs_message_id_key;
    PERFORM outbox_ring_new_slot(0, opts);
    INSERT INTO outbox_jobs_ring_0 SELECT h.*, 0 FROM outbox_jobs_heap AS h;
    ALTER TABLE outbox_jobs ATTACH PARTITION outbox_jobs_ring_0 DEFAULT;
    DROP TABLE outbox_jobs_heap;
END $$;

-- The slot tables there are: the current one and any a rotation left for the next pass
-- to drop (the grants file gives them to the migrator, the downgrade drops them).
CREATE FUNCTION outbox_ring_slot_tables() RETURNS SETOF REGCLASS LANGUAGE sql STABLE
SET search_path FROM CURRENT AS $$
    SELECT c.oid::regclass FROM pg_class c
    WHERE c.relname ~ '^outbox_jobs_ring_[0-9]+$' AND c.relkind = 'r'
      AND c.relnamespace = (SELECT relnamespace FROM pg_class
                            WHERE oid = CAST('outbox_queue_ring' AS regclass))
$$;

-- One pass of the rotation, in the caller's transaction (one statement in autocommit).
-- First it drops the slots earlier rotations left (detached, no live row in them: every
-- row was copied out; one that someone reads, pg_dump, waits for a later pass). Then,
-- when the current slot is at least every_ms old and holds at least min_dead dead row
-- versions: build the next slot (outbox_ring_new_slot, before any lock on the queue);
-- take ACCESS EXCLUSIVE on the parent and so on the slot, within lock_timeout (no
-- statement on a job is in flight or can start, so none can meet a row this moves);
-- copy every row into the next slot (ids, attempts and leases unchanged: a worker's
-- fence still matches); detach the current slot and attach the next as the DEFAULT
-- partition (both invalidate other sessions' cached plans once). All or nothing: a
-- rotation that is killed, terminated or cut by a restart rolls back whole and the next
-- pass tries again; a busy lock or a slot of more than max_move live rows rolls the
-- new slot back too (the claim stays correct, only not shielded).
-- Answers what it did: rotated, busy (another session rotates), recent, clean,
-- backlog, locked. SECURITY DEFINER, with the migration's search_path: DDL needs the
-- tables' owner, and a worker may run as a role that is not (EXECUTE is revoked from
-- PUBLIC: grant it to such a role).
CREATE FUNCTION outbox_ring_rotate(min_dead BIGINT, every_ms BIGINT, max_move INTEGER,
                                   wait TEXT) RETURNS TEXT LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    ring outbox_queue_ring%ROWTYPE;
    cur REGCLASS;
    nxt REGCLASS;
    left_slot REGCLASS;
    kept BIGINT;
    live BIGINT;
    now_ms BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
BEGIN
    SELECT * INTO ring FROM outbox_queue_ring WHERE id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', wait, true);
    kept := ring.left_from;
    WHILE kept < ring.slot LOOP
        left_slot := to_regclass(format('outbox_jobs_ring_%s', kept));
        IF left_slot IS NOT NULL THEN
            BEGIN
                EXECUTE format('DROP TABLE %s', left_slot);
            EXCEPTION WHEN lock_not_available THEN
                EXIT;
            END;
        END IF;
        kept := kept + 1;
    END LOOP;
    IF kept <> ring.left_from THEN
        UPDATE outbox_queue_ring SET left_from = kept WHERE id = 1;
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
    BEGIN
        nxt := outbox_ring_new_slot(ring.slot + 1,
                                    (SELECT reloptions FROM pg_class WHERE oid = cur));
        LOCK TABLE outbox_jobs IN ACCESS EXCLUSIVE MODE;
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %s) AS l', cur,
                       max_move + 1) INTO live;
        IF live > max_move THEN
            RAISE EXCEPTION USING ERRCODE = 'OBRB1';  -- rolls the new slot back
        END IF;
        EXECUTE format('INSERT INTO %s SELECT * FROM %s', nxt, cur);
        EXECUTE format('ALTER TABLE outbox_jobs DETACH PARTITION %s', cur);
        EXECUTE format('ALTER TABLE outbox_jobs ATTACH PARTITION %s DEFAULT', nxt);
    EXCEPTION
        WHEN lock_not_available THEN
            RETURN 'locked';
        WHEN SQLSTATE 'OBRB1' THEN
            RETURN 'backlog';
    END;
    UPDATE outbox_queue_ring SET slot = ring.slot + 1, rotated_at = now_ms,
                                 rotations = rotations + 1
    WHERE id = 1;
    RETURN 'rotated';
END $$;

REVOKE EXECUTE ON FUNCTION outbox_ring_rotate(BIGINT, BIGINT, INTEGER, TEXT) FROM PUBLIC;
