-- The dashboard's reads (outbox/dashboard/store.py). Every one is index-backed or reads
-- only the dead letters, which stay few; none reads a payload unless it says so.

-- name: dashboard_jobs_ready
-- Due, unheld jobs of one queue at ONE priority, next due first: an exact range of the
-- claim index (queue, priority, available_at, id). store.job_page walks the priorities
-- in order (0 first, as a worker claims), so a page follows the index's order
-- (priority, available_at, id) without sorting. Asked for every priority at once, the
-- bound available_at <= now could not start each priority's range: a page of priority 1
-- would read past every delayed job of priority 0. With 1,000,000 jobs (the dashboard
-- bench's data, 250,000 in the queue), EXPLAIN ANALYZE: an index scan of 51 rows, 0.5 ms;
-- ordered by (available_at, id) alone, as before the index led with priority, it was a
-- bitmap scan of the queue's 166,667 due jobs and a sort, 204 ms (delayed: a parallel
-- sequential scan and a sort, 129 ms; now 0.2 ms).
-- The clock is a subquery so PostgreSQL reads it once and bounds the index range by it
-- (inline, clock_timestamp() is volatile: a filter over every row of the queue).
-- Keyset paging on (available_at, id) within the priority: page N costs what page 1
-- costs (the >= bound starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, priority, id
FROM outbox_jobs
WHERE queue = :queue AND priority = :priority AND reserved_by IS NULL
  AND available_at <= (SELECT {now_ms})
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
  AND available_at >= :after_at
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_delayed
-- Unheld jobs not yet due at ONE priority, soonest first: the claim index again, one
-- exact range per priority (see dashboard_jobs_ready: the ready jobs, which sort first
-- in each priority, are never read).
-- Keyset paging on (available_at, id) within the priority, as above.
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, priority, id
FROM outbox_jobs
WHERE queue = :queue AND priority = :priority AND reserved_by IS NULL
  AND available_at > (SELECT {now_ms})
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
  AND available_at >= :after_at
  AND (available_at > :after_at OR (available_at = :after_at AND id > :after_id))
ORDER BY available_at, id
LIMIT :limit;

-- name: dashboard_jobs_reserved
-- Jobs a worker holds, soonest lease expiry first: the lease index.
-- Keyset paging on (lease_expires_at, id): page N costs what page 1 costs (the >= bound
-- starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, priority, id
FROM outbox_jobs
WHERE queue = :queue AND reserved_by IS NOT NULL
  AND (CAST(:job_name AS varchar) IS NULL OR job_name = :job_name)
  AND lease_expires_at >= :after_at
  AND (lease_expires_at > :after_at OR (lease_expires_at = :after_at AND id > :after_id))
ORDER BY lease_expires_at, id
LIMIT :limit;

-- name: dashboard_queue_counts
-- One queue's ready, delayed and dead jobs, each counted up to :cap. The claim index is
-- (queue, priority, available_at, id): the ready and delayed jobs of one priority are one
-- range of it, so each count walks the priorities (a LATERAL probe per priority, which
-- stops as soon as :cap rows are counted) instead of reading every entry of the queue
-- past the clock's bound. At 1,000,000 jobs (the dashboard bench's data) the delayed
-- count took 18.5 ms reading past the queue's due jobs, and takes 3.5 ms this way. The
-- dead letters: a range of their (queue, id) index.
SELECT
    (SELECT count(*) FROM (SELECT 1 AS one
        FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS p (priority)
        CROSS JOIN LATERAL (SELECT 1 AS one FROM outbox_jobs j
            WHERE j.queue = :queue AND j.priority = p.priority AND j.reserved_by IS NULL
              AND j.available_at <= clock.ms LIMIT :cap) AS x
        LIMIT :cap) AS r),
    (SELECT count(*) FROM (SELECT 1 AS one
        FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS p (priority)
        CROSS JOIN LATERAL (SELECT 1 AS one FROM outbox_jobs j
            WHERE j.queue = :queue AND j.priority = p.priority AND j.reserved_by IS NULL
              AND j.available_at > clock.ms LIMIT :cap) AS x
        LIMIT :cap) AS d),
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_failed_jobs
        WHERE queue = :queue LIMIT :cap) AS x)
FROM (SELECT {now_ms} AS ms) AS clock;

-- name: dashboard_queue_names
-- Every queue with a job or a dead letter, without reading every row: a loose index scan
-- of the claim index (one probe per queue) and of the dead letters' (queue, id) index.
-- Queues with held jobs only come from dashboard_held_counts.
WITH RECURSIVE unheld AS (
    (SELECT queue FROM outbox_jobs WHERE reserved_by IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM outbox_jobs j
            WHERE j.reserved_by IS NULL AND j.queue > unheld.queue
            ORDER BY j.queue LIMIT 1)
    FROM unheld WHERE unheld.queue IS NOT NULL
), dead AS (
    (SELECT queue FROM outbox_failed_jobs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT f.queue FROM outbox_failed_jobs f WHERE f.queue > dead.queue
            ORDER BY f.queue LIMIT 1)
    FROM dead WHERE dead.queue IS NOT NULL
)
SELECT queue FROM unheld WHERE queue IS NOT NULL
UNION
SELECT queue FROM dead WHERE queue IS NOT NULL;
