-- The limits migration: global concurrency and rate limits (outbox.queue.gate). New tables only:
-- code of the previous version never reads them, so a rolling upgrade needs nothing more.
-- outbox_limits holds one row per limited key, the row an admission locks;
-- outbox_limit_slots the running jobs' slots (expiring with their lease);
-- outbox_limit_starts each start of a rate-limited job, and reservations of future ones
-- (the sliding window counts both); outbox_limit_waits the jobs waiting for a slot
-- (woken when one is freed).

CREATE TABLE IF NOT EXISTS outbox_limits (
	limit_key VARCHAR(64) NOT NULL, 
	created_at BIGINT NOT NULL, 
	PRIMARY KEY (limit_key)
);

CREATE TABLE IF NOT EXISTS outbox_limit_slots (
	limit_key VARCHAR(64) NOT NULL, 
	job_id BIGINT NOT NULL, 
	attempts INTEGER NOT NULL, 
	holder VARCHAR(200) NOT NULL, 
	expires_at BIGINT NOT NULL, 
	PRIMARY KEY (limit_key, job_id)
);

CREATE TABLE IF NOT EXISTS outbox_limit_starts (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	limit_key VARCHAR(64) NOT NULL, 
	started_at BIGINT NOT NULL, 
	job_id BIGINT
);

CREATE INDEX IF NOT EXISTS outbox_limit_starts_job ON outbox_limit_starts (job_id);

CREATE INDEX IF NOT EXISTS outbox_limit_starts_key ON outbox_limit_starts (limit_key, started_at);

CREATE TABLE IF NOT EXISTS outbox_limit_waits (
	limit_key VARCHAR(64) NOT NULL, 
	job_id BIGINT NOT NULL, 
	PRIMARY KEY (limit_key, job_id)
);

CREATE INDEX IF NOT EXISTS outbox_limit_waits_job ON outbox_limit_waits (job_id);
