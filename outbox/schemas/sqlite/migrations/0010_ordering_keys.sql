-- The ordering keys migration (outbox.queue.ordering): jobs that share an ordering key run
-- one at a time, in commit order. ordering_key holds the SHA-256 digest (hex) of the key,
-- NULL for a job without one, on the intent, the queued job and the dead letter;
-- ordering_held is 1 on a dead letter that keeps its key blocked (dead_letter_holds_key).
-- outbox_ordering_keys has one row per key with unfinished jobs: entering the line and
-- leaving it lock that row. A job waiting its turn keeps its due time shifted past any
-- real one (outbox.job.BLOCKED_OFFSET_MS, 10^15), so the claim is unchanged;
-- outbox_jobs_ordering_live finds a key's job in its turn without reading those waiting.
-- Rolling upgrade: code of the previous version writes no ordering key (NULL) and reads
-- none of the new columns; a keyed intent it relays loses its order, nothing else.

ALTER TABLE outbox_messages ADD COLUMN ordering_key VARCHAR(64);

ALTER TABLE outbox_jobs ADD COLUMN ordering_key VARCHAR(64);

ALTER TABLE outbox_failed_jobs ADD COLUMN ordering_key VARCHAR(64);

ALTER TABLE outbox_failed_jobs ADD COLUMN ordering_held SMALLINT NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS outbox_ordering_keys (
	key_digest VARCHAR(64) NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (key_digest)
);

CREATE INDEX IF NOT EXISTS outbox_jobs_ordering ON outbox_jobs (ordering_key, id) WHERE ordering_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS outbox_jobs_ordering_live ON outbox_jobs (ordering_key) WHERE ordering_key IS NOT NULL AND available_at < 1000000000000000;

CREATE INDEX IF NOT EXISTS outbox_messages_ordering ON outbox_messages (ordering_key, id) WHERE ordering_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS outbox_failed_jobs_held ON outbox_failed_jobs (ordering_key) WHERE ordering_held = 1;
