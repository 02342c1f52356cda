"""One trace across real processes (issue 27, item 4): the producer's span in this test
process, the relay process's batch span linked to it, and the worker process's span for
each attempt (a failed one and its retry) under it, on every backend.

The relay and the worker are the real ``outbox`` command line, started through
``tests.fixtures.apps.traced``, which gives each process the SDK with an exporter that
appends JSON lines to one file; this process's spans join the file at the end, so the
file holds the whole trace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox import Job, record
from tests.fixtures.apps.traced import SECRET_MESSAGE
from tests.fixtures.databases import raw_connect
from tests.fixtures.tracing import (  # noqa: F401  (spans: the fixture)
    as_dict,
    read_spans,
    spans,
    traced_cli,
)

SECRET_PAYLOAD = "payload-secret-4711"


def test_one_trace_holds_the_producer_the_relay_link_and_every_attempt(
    database: Any, db_url: str, tmp_path: Path, spans: InMemorySpanExporter  # noqa: F811
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    app = raw_connect(db_url)
    try:
        with trace.get_tracer("app").start_as_current_span("POST /notes"):
            message_id = record(app, "note:1", Job("traced.flaky", {"secret": SECRET_PAYLOAD}))
        app.commit()
    finally:
        app.close()

    traced_cli(db_url, spans_file, "relay", "relay")
    worker_log = traced_cli(
        db_url, spans_file, "worker", "--log-format", "json", "worker", "default",
        "--app", "tests.fixtures.apps.traced:registry", "--max-jobs", "2", "--max-time", "60",
    )
    with open(spans_file, "a", encoding="utf-8") as out:
        for span in spans.get_finished_spans():
            out.write(json.dumps(as_dict(span)) + "\n")

    found = read_spans(spans_file)
    (producer,) = [s for s in found if s["name"] == "POST /notes"]
    (batch,) = [s for s in found if s["name"] == "send"]
    attempts = sorted(
        (s for s in found if s["name"] == "default process"),
        key=lambda s: s["attributes"]["messaging.outbox.attempt"],
    )

    # The relay's batch, in the relay process, links to the producer's span.
    assert batch["resource"]["service.name"] == "relay"
    assert batch["kind"] == "PRODUCER"
    assert batch["links"] == [
        {"trace_id": producer["trace_id"], "span_id": producer["span_id"]}
    ]
    # Each attempt, in the worker process, is a child of the producer's span: one trace.
    assert [a["attributes"]["messaging.outbox.attempt"] for a in attempts] == [1, 2]
    for a in attempts:
        assert a["resource"]["service.name"] == "worker"
        assert a["kind"] == "CONSUMER"
        assert (a["trace_id"], a["parent_id"]) == (producer["trace_id"], producer["span_id"])
        assert a["attributes"]["messaging.system"] == "outbox"
        assert a["attributes"]["messaging.operation.type"] == "process"
        assert a["attributes"]["messaging.destination.name"] == "default"
        assert a["attributes"]["messaging.message.id"] == message_id
    failed, retried = attempts
    assert (failed["status"], failed["status_description"]) == ("ERROR", "ConnectionError")
    assert failed["attributes"]["error.type"] == "ConnectionError"
    assert failed["events"] == []  # no exception event: no message, no traceback
    assert retried["status"] == "UNSET"
    assert retried["attributes"]["messaging.outbox.outcome"] == "done"

    # Nothing private in any span; and the worker's logs keep to the class too.
    text = spans_file.read_text(encoding="utf-8")
    assert SECRET_PAYLOAD not in text and SECRET_MESSAGE not in text
    assert SECRET_PAYLOAD not in worker_log and SECRET_MESSAGE not in worker_log
