-- Migration "throughput": per-minute job completions for the dashboard's throughput chart.
--
-- Each worker counts what it settled (succeeded, retried, dead-lettered) per minute and
-- queue in memory and adds its counts to its own rows every few seconds: one row per
-- (minute, queue, worker), so no two workers ever write the same row. The chart sums a
-- minute's rows; `outbox prune` removes minutes older than a day. A new table only:
-- code of version 2 neither reads nor writes it.

CREATE TABLE IF NOT EXISTS outbox_throughput (
	minute_at BIGINT NOT NULL,
	queue VARCHAR(200) NOT NULL,
	worker_id VARCHAR(200) NOT NULL,
	succeeded INTEGER NOT NULL DEFAULT 0,
	retried INTEGER NOT NULL DEFAULT 0,
	dead INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (minute_at, queue, worker_id)
);
