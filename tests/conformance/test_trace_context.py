"""Tracing on every backend (outbox.tracing): the caller's span context is stored with the
intent and the job, survives the relay, and parents each attempt's span; the relay batch
links to it. In-process here, with the SDK's in-memory exporter; across real processes in
tests/integration/test_tracing.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox import Job, Registry, record, record_many
from outbox.db.connection import Connection, Database
from outbox.queue import JobContext, Worker, WorkerConfig, push, push_many
from outbox.relay import Relay, RelayConfig
from outbox.testing import run_pending
from tests.fixtures.tracing import spans  # noqa: F401  (the fixture)

SECRET = "payload-secret-4711"
MESSAGE = "message-secret-0815"


def _stored(conn: Connection, table: str) -> dict[str, Any]:
    rows = conn.execute_sql(f"SELECT message_id, trace_context FROM {table}")
    return {str(m): t for m, t in rows}


def _traceparent(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def test_record_and_push_store_the_callers_span_and_nothing_outside_one(
    database: Database, app_conn: Any, conn: Connection, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        recorded = record(app_conn, "t:1", Job("t.job", {"s": SECRET}))
        many = record_many(app_conn, [("t:2", Job("t.job", 2)), ("t:3", Job("t.job", 3))])
        pushed = push(app_conn, Job("t.job", 4))
        pushed_many = push_many(app_conn, [Job("t.job", 5)])
    untraced = record(app_conn, "t:9", Job("t.job", 9))
    untraced_many = record_many(app_conn, [("t:8", Job("t.job", 8))])
    untraced_pushed = [*push_many(app_conn, [Job("t.job", 7)]), push(app_conn, Job("t.job", 6))]
    app_conn.commit()
    parent = _traceparent(request)

    intents = _stored(conn, "outbox_messages")
    assert {m: intents[m] for m in (recorded, *many)} == dict.fromkeys((recorded, *many), parent)
    assert intents[untraced] is None and intents[untraced_many[0]] is None  # NULL, not "null"
    jobs = _stored(conn, "outbox_jobs")
    assert jobs == {pushed: parent, pushed_many[0]: parent, **dict.fromkeys(untraced_pushed)}


@pytest.mark.parametrize("in_python", [False, True], ids=["sql-verify", "python-verify"])
def test_the_relay_carries_the_context_into_the_queue_and_links_its_batch(
    database: Database,
    app_conn: Any,
    conn: Connection,
    spans: InMemorySpanExporter,  # noqa: F811
    in_python: bool,
) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        traced = record(app_conn, "t:1", Job("t.job", {"s": SECRET}))
    untraced = record(app_conn, "t:2", Job("t.job", 2))
    with tracer.start_as_current_span("keyed request") as keyed_request:
        keyed = record(app_conn, "t:3", Job("t.job", 3, ordering_key="order:t"))
    app_conn.commit()

    with Relay(database, RelayConfig(verify_in_python=in_python)) as relay:
        result = relay.run_once()
    assert result.handed_off == 3
    assert _stored(conn, "outbox_jobs") == {
        traced: _traceparent(request), untraced: None, keyed: _traceparent(keyed_request)}

    (batch,) = [s for s in spans.get_finished_spans() if s.name == "send"]
    assert batch.kind is trace.SpanKind.PRODUCER
    assert batch.parent is None  # a batch serves many requests: it links to them
    attrs = dict(batch.attributes or {})
    assert attrs["messaging.system"] == "outbox"
    assert attrs["messaging.operation.type"] == "send"
    assert attrs["messaging.batch.message_count"] == 3
    assert sorted(li.context.span_id for li in batch.links) == sorted(
        s.get_span_context().span_id for s in (request, keyed_request)
    )  # a keyed intent's request too (it moves after the batch's statement on PostgreSQL)


def test_each_attempt_is_a_consumer_span_under_the_recorded_one_and_a_failure_names_its_class(
    database: Database, app_conn: Any, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    registry = Registry()

    @registry.job("t.flaky", max_attempts=2)
    def flaky(payload: Any, ctx: JobContext) -> None:
        with trace.get_tracer("handler").start_as_current_span("inside"):
            pass
        if ctx.attempt == 1:
            raise ConnectionError(MESSAGE)

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        message_id = record(app_conn, "t:1", Job("t.flaky", {"s": SECRET}, queue="mail"))
    app_conn.commit()
    with Relay(database) as relay:
        relay.run_once()
    conn = database.connect()
    try:
        with Worker(database, registry, WorkerConfig(queues={"mail": None})) as worker:
            worker.run_once()
            conn.execute_sql("UPDATE outbox_jobs SET available_at = 0")
            worker.run_once()
    finally:
        conn.close()

    finished = spans.get_finished_spans()
    attempts = sorted(
        (s for s in finished if s.name == "mail process"),
        key=lambda s: dict(s.attributes or {})["messaging.outbox.attempt"],
    )
    assert len(attempts) == 2
    trace_id = request.get_span_context().trace_id
    for number, span in enumerate(attempts, start=1):
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.context is not None and span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert dict(span.attributes or {}) == {
            "messaging.system": "outbox",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": "mail",
            "messaging.message.id": message_id,
            "messaging.outbox.attempt": number,
            "messaging.outbox.job_name": "t.flaky",
            "messaging.outbox.outcome": "failed" if number == 1 else "done",
            **({"error.type": "ConnectionError"} if number == 1 else {}),
        }
    first, second = attempts
    assert first.status.status_code is trace.StatusCode.ERROR
    assert first.status.description == "ConnectionError"
    assert not first.events  # record_exception is never called: no message, no traceback
    assert second.status.status_code is trace.StatusCode.UNSET
    inside = [s for s in finished if s.name == "inside"]
    assert {s.parent.span_id for s in inside if s.parent} == {
        a.context.span_id for a in attempts if a.context
    }
    assert_private(finished)


def test_run_pending_runs_each_attempt_in_the_same_span(
    database: Database, app_conn: Any, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    registry = Registry()

    @registry.job("t.async")
    async def handler(payload: Any, ctx: JobContext) -> None:
        return None

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        message_id = record(app_conn, "t:1", Job("t.async", {"s": SECRET}))
    run_pending(app_conn, registry)
    app_conn.rollback()
    (attempt,) = [s for s in spans.get_finished_spans() if s.name == "default process"]
    assert attempt.parent is not None
    assert attempt.parent.span_id == request.get_span_context().span_id
    assert dict(attempt.attributes or {})["messaging.message.id"] == message_id


def test_with_no_provider_nothing_is_made_and_a_bad_stored_context_is_ignored(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.job("t.job")
    def handler(payload: Any, ctx: JobContext) -> None:
        ran.append(ctx.message_id)
        assert not trace.get_current_span().get_span_context().is_valid

    message_id = record(app_conn, "t:1", Job("t.job", 1))
    app_conn.commit()
    with Relay(database) as relay:
        relay.run_once()
    conn.execute_sql("UPDATE outbox_jobs SET trace_context = 'not a traceparent'")
    with Worker(database, registry, WorkerConfig()) as worker:
        worker.run_once()
    assert ran == [message_id]


def test_without_the_api_installed_everything_runs_untraced(tmp_path: Any) -> None:
    """``opentelemetry`` made unimportable: record, relay and worker run as before."""
    url = f"sqlite:///{tmp_path}/o.db"
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # import fails, as without the tracing extra
from outbox import Job, Registry, record, tracing
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import Worker
from outbox.relay import Relay
import sqlite3
db = Database({url!r})
with db.connect() as c:
    migrate(c)
app = sqlite3.connect({str(tmp_path / "o.db")!r})
mid = record(app, "k", Job("t.job", 1))
app.commit()
Relay(db).run_once()
reg = Registry()
ran = []
reg.job("t.job")(lambda p, ctx: ran.append(ctx.message_id))
Worker(db, reg).run_once()
row = app.execute("SELECT count(*) FROM outbox_jobs").fetchone()
print(tracing.available(), tracing.capture(), ran == [mid], row[0])
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "None", "True", "0"], out.stderr


def assert_private(finished: Any) -> None:
    """No span carries a payload or an exception message."""
    text = json.dumps([s.to_json() for s in finished])
    assert SECRET not in text
    assert MESSAGE not in text


def test_the_stored_form_keeps_tracestate_and_drops_one_over_the_limit() -> None:
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from outbox import tracing

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    for state, kept in (("vendor=abc,other=x y", True), ("v=" + "a" * 600, False)):
        ctx = TraceContextTextMapPropagator().extract({"traceparent": parent, "tracestate": state})
        token = context.attach(ctx)
        try:
            stored = tracing.capture()
        finally:
            context.detach(token)
        assert stored is not None and len(stored) <= tracing.MAX_STORED
        if kept:
            assert stored.startswith(parent + " ") and "vendor=abc" in stored
            assert tracing.headers(stored)["traceparent"] == parent
            assert tracing.from_headers(tracing.headers(stored)) == stored
        else:
            assert stored == parent  # an over-long tracestate is left out, never cut
    assert tracing.encode("garbage") is None
    assert tracing.from_headers({"Nats-Msg-Id": "x"}) is None


def test_emit_stores_the_callers_span_with_each_listeners_intent(
    database: Database, app_conn: Any, conn: Connection, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    from outbox import Event, emit

    registry = Registry()
    registry.listen("user.registered", lambda p, ctx: None, name="mail.welcome")
    registry.listen("user.registered", lambda p, ctx: None, name="crm.sync")
    with trace.get_tracer("test").start_as_current_span("request") as request:
        ids = emit(app_conn, "user:1", Event("user.registered", {"u": 1}), registry=registry)
    app_conn.commit()
    intents = _stored(conn, "outbox_messages")
    assert [intents[i] for i in ids] == [_traceparent(request)] * 2


def test_the_scheduler_records_each_tick_inside_a_producer_span(
    database: Database, conn: Connection, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    from datetime import UTC, datetime

    from outbox.schedule.service import Scheduler, SchedulerConfig

    registry = Registry()

    @registry.periodic("*/15 * * * *", name="t.periodic", queue="periodic")
    def tick(payload: Any, ctx: JobContext) -> None:
        return None

    now = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
    with Scheduler(database, registry, SchedulerConfig()) as scheduler:
        (recorded,) = scheduler.run_once(now)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "periodic create"]
    assert span.kind is trace.SpanKind.PRODUCER
    assert dict(span.attributes or {})["messaging.outbox.schedule"] == "t.periodic"
    assert _stored(conn, "outbox_messages") == {recorded.message_id: _traceparent(span)}
