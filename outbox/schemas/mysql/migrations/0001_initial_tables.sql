-- Migration 1 for mysql: the initial tables, as rendered from outbox.schemas.tables
-- at version 1, frozen here so later changes to the tables cannot alter it.

CREATE TABLE IF NOT EXISTS outbox_messages (
	id BIGINT NOT NULL AUTO_INCREMENT, 
	message_id VARCHAR(36) NOT NULL, 
	key_digest VARCHAR(64) NOT NULL, 
	fingerprint VARCHAR(64) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	payload TEXT, 
	max_attempts INTEGER, 
	available_at BIGINT, 
	state VARCHAR(16) NOT NULL DEFAULT 'pending', 
	created_at BIGINT NOT NULL, 
	published_at BIGINT, 
	failed_at BIGINT, 
	failure_reason VARCHAR(64), 
	PRIMARY KEY (id), 
	UNIQUE (message_id), 
	UNIQUE (key_digest)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX IF NOT EXISTS outbox_messages_state_published ON outbox_messages (state, published_at);

CREATE INDEX IF NOT EXISTS outbox_messages_state_id ON outbox_messages (state, id);

CREATE TABLE IF NOT EXISTS outbox_jobs (
	id BIGINT NOT NULL AUTO_INCREMENT, 
	message_id VARCHAR(36) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	payload TEXT NOT NULL, 
	attempts INTEGER NOT NULL DEFAULT 0, 
	max_attempts INTEGER, 
	available_at BIGINT NOT NULL, 
	reserved_at BIGINT, 
	reserved_by VARCHAR(200), 
	lease_expires_at BIGINT, 
	created_at BIGINT NOT NULL, 
	last_error VARCHAR(200), 
	PRIMARY KEY (id), 
	UNIQUE (message_id)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX IF NOT EXISTS outbox_jobs_lease ON outbox_jobs (lease_expires_at);

CREATE INDEX IF NOT EXISTS outbox_jobs_claim ON outbox_jobs (queue, available_at, id);

CREATE TABLE IF NOT EXISTS outbox_failed_jobs (
	id BIGINT NOT NULL AUTO_INCREMENT, 
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
	PRIMARY KEY (id), 
	UNIQUE (message_id)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX IF NOT EXISTS outbox_failed_jobs_queue ON outbox_failed_jobs (queue, id);

CREATE TABLE IF NOT EXISTS outbox_schema_version (
	version INTEGER NOT NULL, 
	description VARCHAR(200) NOT NULL, 
	applied_at BIGINT NOT NULL, 
	PRIMARY KEY (version)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;
