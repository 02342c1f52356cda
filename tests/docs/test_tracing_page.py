"""The tracing page (``docs/how-to/tracing.md``) run as shipped, with OpenTelemetry's SDK.

The set-up blocks become the files they name (``myapp/telemetry.py``, ``myapp/jobs.py``)
and are imported as the worker's ``--app`` would import them; the application's block
records inside its request span; a real ``Relay`` and ``Worker`` then run the job on a
migrated SQLite database, and the spans are checked: one trace from the request to the
attempt. The only stand-in is the OTLP exporter (its package is not a dependency, and a
test sends nothing over the network): an in-memory exporter under the same import path.

Each test installs the page's own provider as the API's global (the API sets it once per
process), then puts the global back unset, as the other tests expect.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

from outbox import Database, Registry, Relay, Worker, WorkerConfig
from outbox.db.migrate import migrate
from tests.docs.pages import blocks_of, code

PAGE = "how-to/tracing.md"
OTLP = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


@pytest.fixture
def fresh_global(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The API's global tracer provider unset, so the page's ``set_tracer_provider``
    takes; unset again afterwards."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    yield
    for name in ("myapp.jobs", "myapp.telemetry", "myapp"):  # the page's app, imported here
        sys.modules.pop(name, None)


def _block(first: str) -> str:
    (found,) = [b.body for b in blocks_of(PAGE) if b.first == first]
    return found


class _Exported(InMemorySpanExporter):
    """``OTLPSpanExporter()`` as the page calls it: every instance keeps its spans here."""

    instances: list[InMemorySpanExporter] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        _Exported.instances.append(self)


def _stub_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = OTLP.split(".")
    for i in range(2, len(parts) + 1):
        name = ".".join(parts[:i])
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so the next part imports under it
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules[OTLP].OTLPSpanExporter = _Exported  # type: ignore[attr-defined]
    _Exported.instances = []


def _migrated(tmp_path: Path) -> tuple[str, Database]:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    database = Database(url)
    with database.connect() as conn:
        migrate(conn)
    return url, database


def test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_global: None
) -> None:
    _stub_otlp(monkeypatch)
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("", encoding="utf-8")
    telemetry, jobs = _block("# myapp/telemetry.py"), _block("# myapp/jobs.py")
    (app / "telemetry.py").write_text(telemetry, encoding="utf-8")
    (app / "jobs.py").write_text(jobs, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("myapp", "myapp.telemetry", "myapp.jobs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    registry: Registry = importlib.import_module("myapp.jobs").registry  # what --app imports
    provider = importlib.import_module("myapp.telemetry").provider
    assert trace.get_tracer_provider() is provider
    (exporter,) = _Exported.instances

    url, database = _migrated(tmp_path)
    engine = sa.create_engine(url)
    notes = sa.Table("notes", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("title", sa.String(100)))
    notes.create(engine)
    application = code(PAGE, heading="Set it up")[1]
    assert application.startswith("from opentelemetry import trace\nfrom outbox import")
    ns = {"engine": engine, "insert": sa.insert, "notes": notes, "note_id": 7, "title": "t"}
    try:
        exec(application, ns)
    finally:
        engine.dispose()
    with Relay(database) as relay:
        relay.run_once()
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.01)) as worker:
        worker.run()
    provider.force_flush()
    try:
        spans = exporter.get_finished_spans()
        (request,) = [s for s in spans if s.name == "POST /notes"]
        (batch,) = [s for s in spans if s.name == "send"]
        (attempt,) = [s for s in spans if s.name == "default process"]
    finally:
        provider.shutdown()
    ids = request.get_span_context()
    assert attempt.kind == SpanKind.CONSUMER and attempt.parent is not None
    assert (attempt.context.trace_id, attempt.parent.span_id) == (ids.trace_id, ids.span_id)
    assert attempt.attributes is not None
    assert attempt.attributes["messaging.outbox.job_name"] == "notes.index"
    assert attempt.attributes["messaging.outbox.outcome"] == "done"
    assert attempt.resource.attributes["service.name"] == "notes"
    assert batch.kind == SpanKind.PRODUCER and batch.parent is None
    assert [link.context.span_id for link in batch.links] == [ids.span_id]


def test_the_testing_example_is_a_test_that_passes(tmp_path: Path) -> None:
    """The page's ``tests/test_tracing.py``, saved as that file in a project of its own
    and run by pytest in a fresh process (one global tracer provider per process), with
    this checkout's ``outbox`` on ``PATH`` for its fixture's ``outbox migrate``."""
    (example,) = [b for b in blocks_of(PAGE) if b.first == "# tests/test_tracing.py"]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_tracing.py").write_text(example.body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "PYTEST_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/test_tracing.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout
