-- name: result_prune
-- At most :batch results past their retention, oldest first.
DELETE FROM outbox_job_results WHERE message_id IN (
    SELECT message_id FROM outbox_job_results WHERE expires_at < {now_ms}
    ORDER BY expires_at LIMIT :batch);
