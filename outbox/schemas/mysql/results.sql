-- name: result_prune
-- At most :batch results past their retention (a workflow node's result stays while its
-- workflow is stored: its dependents read it), oldest first (MariaDB takes no LIMIT in
-- an IN subquery, but a DELETE of its own).
DELETE FROM outbox_job_results WHERE expires_at < {now_ms}
  AND NOT EXISTS (SELECT 1 FROM outbox_workflow_nodes n WHERE n.node_id = outbox_job_results.message_id)
ORDER BY expires_at LIMIT :batch;
