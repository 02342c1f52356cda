-- Migration 3: queue control (priorities, paused queues, cancel, snooze).
--
-- priority: 0 (the default, most urgent) to 9, kept on the intent and copied to the
-- queue row at handoff; the claim index leads with it after the queue so a claim walks
-- the most urgent due jobs first and still stops after its batch.
-- cancel_requested_at: set by `outbox queue cancel` on a held job; its worker reads it
-- with the heartbeat and records the cancellation at acknowledgement.
-- snoozes: how often the job came back through outbox.Snooze (capped; attempts are not).
-- outbox_paused_queues: one row per paused queue; the claim checks it.
-- The fingerprint of a priority-0 job keeps the version-1 layout, so replays across
-- the upgrade match.

ALTER TABLE outbox_messages ADD COLUMN priority SMALLINT NOT NULL DEFAULT 0;

ALTER TABLE outbox_jobs ADD COLUMN priority SMALLINT NOT NULL DEFAULT 0;

ALTER TABLE outbox_jobs ADD COLUMN cancel_requested_at BIGINT;

ALTER TABLE outbox_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

ALTER TABLE outbox_failed_jobs ADD COLUMN priority SMALLINT NOT NULL DEFAULT 0;

DROP INDEX IF EXISTS outbox_jobs_claim;

CREATE INDEX IF NOT EXISTS outbox_jobs_claim ON outbox_jobs (queue, priority, available_at, id) WHERE reserved_by IS NULL;

CREATE TABLE IF NOT EXISTS outbox_paused_queues (
	queue VARCHAR(200) NOT NULL,
	paused_at BIGINT NOT NULL,
	PRIMARY KEY (queue)
);
