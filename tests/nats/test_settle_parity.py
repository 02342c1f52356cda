"""One job, two paths, one policy: the SQL worker (every backend) and the JetStream
worker (the real nats-server) decide the same for the same failure, snooze, cancel and
raising backoff — the same action, delay and exception class — and write it.

Each path is stepped once (``run_once``); what it decided is heard through the hooks
object (``outbox.hooks``), and what it wrote is read back from the queue table or the
dead-letter stream.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from outbox import Backoff, Registry, Snooze
from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.hooks import NoHooks
from outbox.jetstream import admin as nats_admin
from outbox.jetstream.connect import Broker, parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.queue import admin, control
from outbox.queue.config import WorkerConfig
from outbox.queue.worker import Worker
from outbox.relay import Relay
from tests.nats import support

registry = Registry()


class RaisingBackoff(Backoff):
    def delay(self, attempt: int) -> float:
        raise RuntimeError("a broken backoff")


@registry.job("p.fail", max_attempts=3, backoff=Backoff(base=7.0, cap=100.0, jitter=False))
def fail(payload: Any, ctx: Any) -> None:
    raise RuntimeError("fails")


@registry.job("p.last", max_attempts=1)
def last(payload: Any, ctx: Any) -> None:
    raise RuntimeError("fails on its only attempt")


@registry.job("p.snooze")
def snooze(payload: Any, ctx: Any) -> None:
    raise Snooze(42)


@registry.job("p.broken", max_attempts=3, backoff=RaisingBackoff(jitter=False))
def broken(payload: Any, ctx: Any) -> None:
    raise RuntimeError("fails, and its backoff too")


@registry.job("p.cancel")
def cancel(payload: Any, ctx: Any) -> None:
    """Cancelled by an operator while it runs. On SQL that is ``queue cancel`` and the
    worker's heartbeat; JetStream has no cancel command yet, so the flag is set where
    a heartbeat would set it (the worker's set of cancelled ids)."""
    if payload["db"]:
        control.cancel(payload["db"], ctx.message_id)
    else:
        ctx._cancelled_ids.add(ctx._job_id)
    deadline = time.monotonic() + 5
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)


EXPECTED = {
    "p.fail": ("retry", 7_000, "RuntimeError"),
    "p.last": ("dead", 0, "RuntimeError"),
    "p.snooze": ("snooze", 42_000, None),
    "p.broken": ("retry", 5_000, "RuntimeError"),  # the default backoff's bound
    "p.cancel": ("cancel", 0, "cancelled"),
}


class Heard(NoHooks):
    """Hooks that keep each decision."""

    def __init__(self) -> None:
        self.decisions: dict[str, tuple[str, int, str | None]] = {}

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        self.decisions[job.job_name] = (action, delay_ms, error)


def _record(db_url: str, queue: str, *, cancel_via: str) -> None:
    for name in EXPECTED:
        payload = {"db": cancel_via} if name == "p.cancel" else {}
        support.record_jobs(db_url, queue, 1, job=name, payload=payload, prefix=name)


def _config(queue: str) -> WorkerConfig:
    return WorkerConfig(queues={queue: len(EXPECTED)}, lease=0.3, sleep=0.1)


def _sql_written(database: Database, queue: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The jobs still queued (name → (ms until due by the database's clock, last
    error)) and the dead letters (name → exception class) of ``queue``."""
    with database.connect() as conn:
        now = conn.driver.clock_now()
        queued = {
            j.job_name: (j.available_at - now, j.last_error)
            for j in admin.jobs(conn, queue=queue)
        }
        dead = {f.job_name: f.exception_class for f in admin.failed(conn) if f.queue == queue}
    return queued, dead


@pytest.mark.timeout(120)
def test_sql_and_jetstream_decide_and_write_the_same(
    database: Database, db_url: str, nats_url: str
) -> None:
    sql_queue, nats_queue = support.queue_name("ps"), support.queue_name("pn")
    _record(db_url, nats_queue, cancel_via="")
    with support.relay(database, nats_url) as relay:
        relay.run()
    _record(db_url, sql_queue, cancel_via=db_url)
    with Relay(database) as sql_relay:
        sql_relay.run()

    sql_heard, nats_heard = Heard(), Heard()
    with Worker(database, registry, _config(sql_queue), hooks=sql_heard) as worker:
        assert worker.run_once(timeout=20) == len(EXPECTED)
    nats_worker = JetStreamWorker(
        parse_url(nats_url), registry, _config(nats_queue), hooks=nats_heard
    )
    assert nats_worker.run_once(timeout=20) == len(EXPECTED)

    assert sql_heard.decisions == EXPECTED
    assert nats_heard.decisions == EXPECTED

    # What each wrote: the retries and the snooze wait in the queue table for as long
    # as decided; the dead letters carry the decided class on both paths.
    queued, dead = _sql_written(database, sql_queue)
    for name in ("p.fail", "p.broken", "p.snooze"):
        wait_ms, error = queued[name]
        assert EXPECTED[name][1] - 5_000 < wait_ms <= EXPECTED[name][1], name
        assert error == EXPECTED[name][2], name
    assert dead == {"p.last": "RuntimeError", "p.cancel": "cancelled"}
    with Broker(parse_url(nats_url)) as broker:
        buried = {d.job_name: d.exception_class for d in nats_admin.failed(broker, 50)
                  if d.queue == nats_queue}
    assert buried == dead
    assert nats_worker.stats.retried == 2 and nats_worker.stats.snoozed == 1
