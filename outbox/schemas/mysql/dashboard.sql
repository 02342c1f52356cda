-- The dashboard's reads (outbox/dashboard/store.py). Every one is index-backed or reads
-- only the dead letters, which stay few; none reads a payload unless it says so.

-- name: dashboard_jobs_ready
-- Due, unheld jobs of one queue at ONE priority, next due first: an exact range of the
-- claim index (queue, priority, available_at, id). store.job_page walks the priorities
-- in order (0 first, as a worker claims), so a page follows the index's order
-- (priority, available_at, id) without sorting. Asked for every priority at once, the
-- bound available_at <= now could not start each priority's range: a page of priority 1
-- would read past every delayed job of priority 0.
-- The clock is a subquery so PostgreSQL reads it once and bounds the index range by it
-- (inline, clock_timestamp() is volatile: a filter over every row of the queue).
-- Keyset paging on (available_at, id) within the priority: page N costs what page 1
-- costs (the >= bound starts the index range at the cursor; the OR only breaks ties).
SELECT message_id, queue, job_name, attempts, max_attempts, available_at, reserved_at,
       reserved_by, lease_expires_at, created_at, last_error, priority, id
FROM outbox_jobs
WHERE queue = :queue AND priority = :priority AND reserved_by IS NULL
  AND available_at <= (SELECT {now_ms})
  AND (:job_name IS NULL OR job_name = :job_name)
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
  AND (:job_name IS NULL OR job_name = :job_name)
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
  AND (:job_name IS NULL OR job_name = :job_name)
  AND lease_expires_at >= :after_at
  AND (lease_expires_at > :after_at OR (lease_expires_at = :after_at AND id > :after_id))
ORDER BY lease_expires_at, id
LIMIT :limit;

-- name: dashboard_queue_counts
-- One queue's ready, delayed and dead jobs, each counted up to :cap: the claim index
-- (queue, priority, available_at, id), read from the queue's first entry and stopped at
-- :cap matches (the clock's bound follows the priority, so it does not start the range:
-- the delayed count reads past due entries; PostgreSQL and SQLite probe each priority
-- instead; here the index also holds held rows, so each entry is checked in the row
-- anyway), and the dead letters' (queue, id) index. MariaDB lets no derived table see an
-- outer one, so each count reads the clock itself.
SELECT
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_jobs
        WHERE queue = :queue AND reserved_by IS NULL AND available_at <= (SELECT {now_ms})
        LIMIT :cap) AS r),
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_jobs
        WHERE queue = :queue AND reserved_by IS NULL AND available_at > (SELECT {now_ms})
        LIMIT :cap) AS d),
    (SELECT count(*) FROM (SELECT 1 AS one FROM outbox_failed_jobs
        WHERE queue = :queue LIMIT :cap) AS x);

-- name: dashboard_queue_names
-- Every queue with a job or a dead letter, without reading every row: a loose index scan
-- (one MIN probe per queue) of the claim index, which on MariaDB holds held rows too,
-- and of the dead letters' (queue, id) index.
WITH RECURSIVE jobs AS (
    SELECT (SELECT MIN(queue) FROM outbox_jobs) AS queue
    UNION ALL
    SELECT (SELECT MIN(j.queue) FROM outbox_jobs j WHERE j.queue > jobs.queue)
    FROM jobs WHERE jobs.queue IS NOT NULL
), dead AS (
    SELECT (SELECT MIN(queue) FROM outbox_failed_jobs) AS queue
    UNION ALL
    SELECT (SELECT MIN(f.queue) FROM outbox_failed_jobs f WHERE f.queue > dead.queue)
    FROM dead WHERE dead.queue IS NOT NULL
)
SELECT queue FROM jobs WHERE queue IS NOT NULL
UNION
SELECT queue FROM dead WHERE queue IS NOT NULL;
