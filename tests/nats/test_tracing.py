"""One trace across real processes on the JetStream path: the producer's span here, the
relay process's batch span (``messaging.system`` nats) linked to it, and the JetStream
worker process's span for each attempt under it, the context having ridden in the
message's ``traceparent`` header, through a retry (a NAK and a redelivery).
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox import Job, record
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures.apps.traced import SECRET_MESSAGE
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.fixtures.tracing import (  # noqa: F401  (spans: the fixture)
    as_dict,
    read_spans,
    spans,
    traced_cli,
)
from tests.nats import support

SECRET_PAYLOAD = "payload-secret-4711"


def test_the_trace_survives_the_jetstream_headers(
    tmp_path: Path, nats_url: str, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    url = sqlite_url(tmp_path)
    with Database(url).connect() as c:
        migrate(c)
    queue = support.queue_name("traced")
    spans_file = tmp_path / "spans.jsonl"
    app = raw_connect(url)
    try:
        with trace.get_tracer("app").start_as_current_span("POST /notes"):
            job = Job("traced.flaky", {"secret": SECRET_PAYLOAD}, queue=queue)
            message_id = record(app, "note:1", job)
        app.commit()
    finally:
        app.close()

    traced_cli(url, spans_file, "relay", "relay", "--target", nats_url)
    traced_cli(
        url, spans_file, "worker", "worker", queue, "--broker", nats_url,
        "--app", "tests.fixtures.apps.traced:registry", "--max-jobs", "2", "--max-time", "60",
    )
    with open(spans_file, "a", encoding="utf-8") as out:
        for span in spans.get_finished_spans():
            out.write(json.dumps(as_dict(span)) + "\n")

    found = read_spans(spans_file)
    (producer,) = [s for s in found if s["name"] == "POST /notes"]
    (batch,) = [s for s in found if s["name"] == "send"]
    attempts = sorted(
        (s for s in found if s["name"] == f"{queue} process"),
        key=lambda s: s["attributes"]["messaging.outbox.attempt"],
    )
    assert batch["attributes"]["messaging.system"] == "nats"
    assert batch["links"] == [{"trace_id": producer["trace_id"], "span_id": producer["span_id"]}]
    assert [a["attributes"]["messaging.outbox.attempt"] for a in attempts] == [1, 2]
    for a in attempts:
        assert a["resource"]["service.name"] == "worker"
        assert (a["trace_id"], a["parent_id"]) == (producer["trace_id"], producer["span_id"])
        assert a["attributes"]["messaging.system"] == "nats"
        assert a["attributes"]["messaging.destination.name"] == queue
        assert a["attributes"]["messaging.message.id"] == message_id
    assert (attempts[0]["status"], attempts[0]["status_description"]) == (
        "ERROR",
        "ConnectionError",
    )
    assert attempts[1]["status"] == "UNSET"
    text = spans_file.read_text(encoding="utf-8")
    assert SECRET_PAYLOAD not in text and SECRET_MESSAGE not in text
