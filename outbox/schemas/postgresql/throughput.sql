-- name: throughput_add
-- A worker's counts since its last flush, added to its own rows: a JSON array of
-- [age_ms, queue, succeeded, retried, dead], one per (minute, queue) the worker counted
-- in, age_ms being how long ago (by the worker's clock) the middle of that minute was.
-- The minute is placed by the database's clock (now - age), so a worker whose clock is
-- off by less than half a minute still lands its counts in the right one. The rows are
-- keyed by worker: no other writer ever touches them, so this never waits on a lock
-- another worker holds. GROUP BY merges two entries that land in the same minute (ON
-- CONFLICT may not touch one row twice in a statement).
INSERT INTO outbox_throughput AS t (minute_at, queue, worker_id, succeeded, retried, dead)
SELECT ((clock.now_ms - (e ->> 0)::bigint) / 60000) * 60000, e ->> 1, :worker_id,
       SUM((e ->> 2)::int), SUM((e ->> 3)::int), SUM((e ->> 4)::int)
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e, (SELECT {now_ms} AS now_ms) AS clock
GROUP BY 1, 2
ON CONFLICT (minute_at, queue, worker_id) DO UPDATE SET
    succeeded = t.succeeded + EXCLUDED.succeeded,
    retried = t.retried + EXCLUDED.retried,
    dead = t.dead + EXCLUDED.dead;
