-- name: result_prune
-- At most :batch results past their retention, oldest first (MariaDB takes no LIMIT in
-- an IN subquery, but a DELETE of its own).
DELETE FROM outbox_job_results WHERE expires_at < {now_ms} ORDER BY expires_at LIMIT :batch;
