-- Migration 1 for sqlite: the initial tables, as rendered from outbox.schemas.tables
-- at version 1, frozen here so later changes to the tables cannot alter it.

CREATE TABLE IF NOT EXISTS outbox_messages (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	message_id VARCHAR(36) NOT NULL, 
	key_digest VARCHAR(64) NOT NULL, 
	fingerprint VARCHAR(64) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	payload TEXT, 
	max_attempts INTEGER, 
	available_at BIGINT, 
	state VARCHAR(16) DEFAULT 'pending' NOT NULL, 
	created_at BIGINT NOT NULL, 
	published_at BIGINT, 
	failed_at BIGINT, 
	failure_reason VARCHAR(64), 
	UNIQUE (message_id), 
	UNIQUE (key_digest)
);

CREATE INDEX IF NOT EXISTS outbox_messages_published ON outbox_messages (published_at) WHERE state = 'published';

CREATE INDEX IF NOT EXISTS outbox_messages_pending ON outbox_messages (id) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS outbox_messages_failed ON outbox_messages (id) WHERE state = 'failed';

CREATE TABLE IF NOT EXISTS outbox_jobs (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	message_id VARCHAR(36) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	payload TEXT NOT NULL, 
	attempts INTEGER DEFAULT 0 NOT NULL, 
	max_attempts INTEGER, 
	available_at BIGINT NOT NULL, 
	reserved_at BIGINT, 
	reserved_by VARCHAR(200), 
	lease_expires_at BIGINT, 
	created_at BIGINT NOT NULL, 
	last_error VARCHAR(200), 
	UNIQUE (message_id)
);

CREATE INDEX IF NOT EXISTS outbox_jobs_lease ON outbox_jobs (lease_expires_at) WHERE reserved_by IS NOT NULL;

CREATE INDEX IF NOT EXISTS outbox_jobs_claim ON outbox_jobs (queue, available_at, id) WHERE reserved_by IS NULL;

CREATE TABLE IF NOT EXISTS outbox_failed_jobs (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	message_id VARCHAR(36) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	payload TEXT NOT NULL, 
	attempts INTEGER NOT NULL, 
	max_attempts INTEGER, 
	exception_class VARCHAR(200) NOT NULL, 
	exception_message TEXT, 
	exception_trace TEXT, 
	failed_at BIGINT NOT NULL, 
	UNIQUE (message_id)
);

CREATE INDEX IF NOT EXISTS outbox_failed_jobs_queue ON outbox_failed_jobs (queue, id);

CREATE TABLE IF NOT EXISTS outbox_schema_version (
	version INTEGER NOT NULL, 
	description VARCHAR(200) NOT NULL, 
	applied_at BIGINT NOT NULL, 
	PRIMARY KEY (version)
);
