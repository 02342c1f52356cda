-- name: result_prune
-- At most :batch results past their retention (a workflow node's result stays while its
-- workflow is stored: its dependents read it), oldest first.
DELETE FROM outbox_job_results WHERE message_id IN (
    SELECT message_id FROM outbox_job_results WHERE expires_at < {now_ms}
      AND NOT EXISTS (SELECT 1 FROM outbox_workflow_nodes n WHERE n.node_id = outbox_job_results.message_id)
    ORDER BY expires_at LIMIT :batch);
