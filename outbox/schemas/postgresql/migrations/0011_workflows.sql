-- The workflows migration: a graph of jobs recorded in one transaction (outbox.workflows).
-- New tables only: code of the previous version never reads them, so a rolling upgrade
-- needs nothing more. Rendered from outbox.schemas.tables.

CREATE TABLE IF NOT EXISTS outbox_workflows (
	workflow_id VARCHAR(36) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	key_digest VARCHAR(64) NOT NULL, 
	fingerprint VARCHAR(64) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	node_count INTEGER NOT NULL, 
	created_at BIGINT NOT NULL, 
	PRIMARY KEY (workflow_id)
);

CREATE INDEX IF NOT EXISTS outbox_workflows_created ON outbox_workflows (created_at);

CREATE TABLE IF NOT EXISTS outbox_workflow_nodes (
	node_id VARCHAR(36) NOT NULL, 
	workflow_id VARCHAR(36) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	payload TEXT NOT NULL, 
	max_attempts INTEGER, 
	priority SMALLINT DEFAULT 0 NOT NULL, 
	on_failure VARCHAR(8) NOT NULL, 
	deps_total INTEGER NOT NULL, 
	deps_left INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	created_at BIGINT NOT NULL, 
	due_at BIGINT, 
	finished_at BIGINT, 
	PRIMARY KEY (node_id)
);

CREATE UNIQUE INDEX IF NOT EXISTS outbox_workflow_nodes_name ON outbox_workflow_nodes (workflow_id, name);

CREATE TABLE IF NOT EXISTS outbox_workflow_edges (
	parent_id VARCHAR(36) NOT NULL, 
	child_id VARCHAR(36) NOT NULL, 
	workflow_id VARCHAR(36) NOT NULL, 
	PRIMARY KEY (parent_id, child_id)
);

CREATE INDEX IF NOT EXISTS outbox_workflow_edges_child ON outbox_workflow_edges (child_id);

CREATE INDEX IF NOT EXISTS outbox_workflow_edges_workflow ON outbox_workflow_edges (workflow_id);
