-- The job results migration: the outcome of jobs whose handler keeps its result
-- (outbox.results). A new table only: code of the previous version never reads it, so a
-- rolling upgrade needs nothing more. Rendered from outbox.schemas.tables.

CREATE TABLE IF NOT EXISTS outbox_job_results (
	message_id VARCHAR(36) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	payload TEXT NOT NULL, 
	return_value TEXT, 
	attempts INTEGER NOT NULL, 
	enqueued_at BIGINT NOT NULL, 
	started_at BIGINT, 
	finished_at BIGINT NOT NULL, 
	worker_id VARCHAR(200), 
	exception_class VARCHAR(200), 
	exception_trace TEXT, 
	expires_at BIGINT NOT NULL, 
	PRIMARY KEY (message_id)
);

CREATE INDEX IF NOT EXISTS outbox_job_results_expires ON outbox_job_results (expires_at);
