-- The per-minute completion counts (table outbox_throughput, outbox/queue/throughput.py):
-- written by workers (<dialect>/throughput.sql), read by the dashboard's chart, pruned
-- by `outbox prune`.

-- name: throughput_prune
-- Minutes older than :keep_ms by the database's clock: a range at the start of the
-- primary key (minute_at leads it). A day of minutes is a few rows per worker and queue.
DELETE FROM outbox_throughput WHERE minute_at < {now_ms} - :keep_ms;

-- name: dashboard_throughput
-- Per minute and queue since :since_ms, every worker's rows summed: a range of the
-- primary key. An hour is at most 60 rows per queue and worker, however many jobs ran.
SELECT minute_at, queue, SUM(succeeded), SUM(retried), SUM(dead)
FROM outbox_throughput
WHERE minute_at >= :since_ms
GROUP BY minute_at, queue;
