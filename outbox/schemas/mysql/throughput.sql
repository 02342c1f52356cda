-- name: throughput_add
-- A worker's counts since its last flush, added to its own rows: a JSON array of
-- [age_ms, queue, succeeded, retried, dead], one per (minute, queue) the worker counted
-- in, age_ms being how long ago (by the worker's clock) the middle of that minute was.
-- The minute is placed by the database's clock (now - age), so a worker whose clock is
-- off by less than half a minute still lands its counts in the right one. The rows are
-- keyed by worker: no other writer ever touches them, so this never waits on a lock
-- another worker holds. GROUP BY merges two entries that land in the same minute.
INSERT INTO outbox_throughput (minute_at, queue, worker_id, succeeded, retried, dead)
SELECT (({now_ms} - r.age_ms) DIV 60000) * 60000 AS m, r.queue AS q, :worker_id,
       SUM(r.succeeded), SUM(r.retried), SUM(r.dead)
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
    age_ms BIGINT PATH '$[0]',
    queue VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
    succeeded INT PATH '$[2]',
    retried INT PATH '$[3]',
    dead INT PATH '$[4]'
)) AS r
GROUP BY m, q
ON DUPLICATE KEY UPDATE
    succeeded = outbox_throughput.succeeded + VALUES(succeeded),
    retried = outbox_throughput.retried + VALUES(retried),
    dead = outbox_throughput.dead + VALUES(dead);
