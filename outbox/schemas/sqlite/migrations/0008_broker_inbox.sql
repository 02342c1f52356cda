-- The broker inbox migration: the ids of JetStream jobs whose transactional handler committed
-- (outbox.jetstream.inbox). The worker inserts the message id in the handler's own
-- transaction, so a redelivery of an id already here is acknowledged without running.
-- A new table only: code of the previous version never reads it.

CREATE TABLE IF NOT EXISTS outbox_inbox (
	message_id VARCHAR(200) NOT NULL, 
	queue VARCHAR(200) NOT NULL, 
	handled_at BIGINT NOT NULL, 
	PRIMARY KEY (message_id)
);

CREATE INDEX IF NOT EXISTS outbox_inbox_handled ON outbox_inbox (handled_at);
