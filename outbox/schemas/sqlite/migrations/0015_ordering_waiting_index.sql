-- Migration "ordering waiting index": outbox_jobs_ordering (ordering_key, id), every
-- keyed row, becomes outbox_jobs_ordering_waiting, the waiting rows only (available_at
-- past outbox.job.BLOCKED_OFFSET_MS). With outbox_jobs_ordering_live (the rows in their
-- turn) the two split a key's rows between them, so a keyed row's write enters one of
-- them, not both: a promotion (waiting → in turn) and a claim each wrote an entry in
-- outbox_jobs_ordering they did not need, 2 of the 10 index entries a keyed job cost
-- (issue 41). Every statement that asks for a key's jobs of either kind names the kind;
-- "any job of the key" asks both indexes.

DROP INDEX IF EXISTS outbox_jobs_ordering;
CREATE INDEX IF NOT EXISTS outbox_jobs_ordering_waiting ON outbox_jobs (ordering_key, id) WHERE ordering_key IS NOT NULL AND available_at >= 1000000000000000;
