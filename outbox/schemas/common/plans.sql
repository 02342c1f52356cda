-- Plan-test statements every dialect writes alike (outbox/db/plans.py).

-- name: plan_probe_scan
-- A read no index serves (the plan tests prove they would catch a full scan).
SELECT count(*) FROM outbox_jobs WHERE last_error = 'x';

-- name: plan_probe_limit_scan
-- The same for the limits' tables: no index holds a slot's holder.
SELECT count(*) FROM outbox_limit_slots WHERE holder = 'x';
