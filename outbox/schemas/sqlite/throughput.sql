-- name: throughput_add
-- A worker's counts since its last flush, added to its own rows: a JSON array of
-- [age_ms, queue, succeeded, retried, dead], one per (minute, queue) the worker counted
-- in, age_ms being how long ago (by the worker's clock) the middle of that minute was.
-- The minute is placed by the database's clock (now - age), so a worker whose clock is
-- off by less than half a minute still lands its counts in the right one. The rows are
-- keyed by worker: no other writer ever touches them, so this never waits on a lock
-- another worker holds. GROUP BY merges two entries that land in the same minute.
INSERT INTO outbox_throughput (minute_at, queue, worker_id, succeeded, retried, dead)
SELECT (({now_ms} - json_extract(value, '$[0]')) / 60000) * 60000, json_extract(value, '$[1]'),
       :worker_id, SUM(json_extract(value, '$[2]')), SUM(json_extract(value, '$[3]')),
       SUM(json_extract(value, '$[4]'))
FROM json_each(:rows)
GROUP BY 1, 2
ON CONFLICT (minute_at, queue, worker_id) DO UPDATE SET
    succeeded = succeeded + excluded.succeeded,
    retried = retried + excluded.retried,
    dead = dead + excluded.dead;
