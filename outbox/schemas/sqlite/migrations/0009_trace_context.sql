-- The trace context migration: the W3C Trace Context of the span that recorded a job
-- (outbox.tracing), so its attempts join the producer's trace. One nullable column on the
-- intent and on the queue row: "<traceparent>" or "<traceparent> <tracestate>", at most
-- 568 characters; NULL when there was no span. The relay copies it at handoff.
-- Code of the previous version never names it, and its rows leave it NULL.

ALTER TABLE outbox_messages ADD COLUMN trace_context VARCHAR(600);

ALTER TABLE outbox_jobs ADD COLUMN trace_context VARCHAR(600);
