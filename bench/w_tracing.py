"""tracing workload: N record() transactions, one relay drain, one worker drain, timed.

Run as a script, ``python bench/w_tracing.py SRC URL MODE N``, so that ``SRC`` (the
folder holding the ``outbox`` package) decides which code runs: this tree, or the
snapshot of the commit tracing branched from ("today"). ``MODE``:

- ``today``: the snapshot; it has no tracing code at all.
- ``no-api``: this tree with ``opentelemetry`` made unimportable (no ``tracing`` extra).
- ``no-provider``: this tree, the API importable, no tracer provider set.
- ``provider``: this tree, the SDK's provider with a ``BatchSpanProcessor`` whose exporter
  drops every span, each producer transaction inside a span: everything is traced.

Prints one JSON object: record() transactions/s, relay intents/s, worker jobs/s, and the
process's CPU time per record() transaction and per job.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def main(src: str, url: str, mode: str, n: int) -> None:
    src = os.path.abspath(src)
    sys.path.insert(0, src)
    if mode == "no-api":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    span: Any = None
    if mode == "provider":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
        span = trace.get_tracer("bench").start_as_current_span

    import outbox
    from outbox import Job, Registry, record
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate
    from outbox.queue import Worker, WorkerConfig
    from outbox.relay import Relay

    assert outbox.__file__.startswith(src), (outbox.__file__, src)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
        for table in ("outbox_jobs", "outbox_messages", "outbox_keys"):
            c.execute_sql(f"DELETE FROM {table}")
    app = _app_connect(url)
    payload = {"note_id": 1, "title": "x" * 64}
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        job = Job("bench.trace", {**payload, "i": i})
        if span is None:
            record(app, f"trace:{i}", job)
        else:
            with span("request"):
                record(app, f"trace:{i}", job)
        app.commit()
    t1, c1 = time.perf_counter(), time.process_time()
    with Relay(db) as relay:
        moved = relay.run().handed_off
    t2, c2 = time.perf_counter(), time.process_time()
    registry = Registry()
    registry.job("bench.trace")(lambda p, ctx: None)
    done = 0
    with Worker(db, registry, WorkerConfig(concurrency=1)) as worker:
        while worker.run_once():
            pass
        done = worker.stats.succeeded
    t3, c3 = time.perf_counter(), time.process_time()
    app.close()
    assert moved == n and done == n, (moved, done, n)
    import orjson

    rates = {
        "record txn/s": n / (t1 - t0),
        "relay/s": n / (t2 - t1),
        "worker jobs/s": n / (t3 - t2),
        # CPU time of this process (every thread; SQLite works in-process too): what the
        # code costs, much less moved than the wall clock by other load on the machine.
        "record cpu us/txn": (c1 - c0) * 1e6 / n,
        "worker cpu us/job": (c3 - c2) * 1e6 / n,
    }
    print(orjson.dumps(rates).decode())


def _app_connect(url: str) -> Any:
    if url.startswith("sqlite"):
        import sqlite3

        return sqlite3.connect(url.removeprefix("sqlite:///"))
    if url.startswith("postgresql"):
        import psycopg

        return psycopg.connect(url.replace("postgresql+psycopg", "postgresql"))
    import pymysql
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return pymysql.connect(
        host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
        database=u.database,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
