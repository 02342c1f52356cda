-- Migration "drop unread columns": columns of the workflow and ordering-key tables that
-- every statement wrote and none read (issue 41, item 7):
--
-- - outbox_workflow_nodes.deps_total: a node's dependency count is its edges
--   (outbox_workflow_edges); what it still waits for is deps_left.
-- - outbox_workflows.key_digest and .fingerprint: the workflow's idempotency key row in
--   outbox_keys holds both (its message_id is the workflow id), and a replay reads them
--   there.
-- - outbox_ordering_keys.created_at: the reaper's heal pages key rows by digest, never by
--   age; the row is a lock and nothing more.
--
-- Only code of this schema's own development wrote them (no release has the workflow or
-- ordering tables), so no running release is left writing a column that is gone.

ALTER TABLE outbox_workflow_nodes DROP COLUMN IF EXISTS deps_total;
ALTER TABLE outbox_workflows DROP COLUMN IF EXISTS key_digest, DROP COLUMN IF EXISTS fingerprint;
ALTER TABLE outbox_ordering_keys DROP COLUMN IF EXISTS created_at;
