"""The JetStream worker reads time through its injected clock: ``max_time`` is over as
soon as that clock says so, whatever the wall says."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.jetstream import names
from outbox.jetstream.connect import parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.queue.config import WorkerConfig
from tests.fixtures.databases import sqlite_url
from tests.nats import app, support


def test_max_time_is_read_by_the_injected_clock(
    tmp_path: Path, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NATS_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    url = sqlite_url(tmp_path)
    database = Database(url)
    with database.connect() as c:
        migrate(c)
    queue = support.queue_name()
    support.record_jobs(url, queue, 3, job="t.ok")
    with support.relay(database, nats_url) as relay:
        relay.run()
    ticks = itertools.count(0.0, 100.0)  # every reading is 100 s later
    config = WorkerConfig(queues={queue: None}, max_time=60, sleep=0.2, stop_when_empty=True)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config, clock=lambda: next(ticks))
    with ThreadPoolExecutor(1) as pool:
        stats = pool.submit(worker.run).result(timeout=60)
    assert stats.succeeded == 0  # by the wall's clock it would have run all three
    assert support.stream_count(nats_url, names.stream(queue)) == 3  # all still there
