"""The SQL worker reads time through its injected clock only: ``run_once``'s wait ends by
that clock, not by the wall's."""

from __future__ import annotations

import threading
import time
from typing import Any

from outbox import Job, Registry
from outbox.db.connection import Database
from outbox.queue import push
from outbox.queue.config import WorkerConfig
from outbox.queue.worker import Worker
from tests.fixtures.clock import FakeClock
from tests.fixtures.databases import raw_connect

Q = "clocked"


def test_run_once_waits_for_handlers_by_the_injected_clock(
    database: Database, db_url: str
) -> None:
    clock = FakeClock()
    registry = Registry()
    release = threading.Event()

    @registry.job("c.slow")
    def slow(payload: Any, ctx: Any) -> None:
        clock.advance(60)  # past run_once's timeout by the worker's clock
        release.wait(10)

    conn = raw_connect(db_url)
    try:
        push(conn, Job("c.slow", {}, queue=Q))
        conn.commit()
    finally:
        conn.close()
    with Worker(database, registry, WorkerConfig(queues={Q: 1}), clock=clock) as worker:
        began = time.monotonic()
        assert worker.run_once(timeout=5) == 1
        waited = time.monotonic() - began
        release.set()
    assert waited < 4, "run_once waited by the wall clock, not the worker's"
