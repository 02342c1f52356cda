"""The exporter as the services' hooks: a stepped worker's decisions become the job
counters, and the queue gauges age jobs by the database's clock, which stamped them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from outbox import Backoff, Job, Registry
from outbox.db.connection import Database
from outbox.metrics import Exporter
from outbox.queue import push
from outbox.queue.config import WorkerConfig
from outbox.queue.worker import Worker
from tests.fixtures.databases import raw_connect

Q = "hooked"
registry = Registry()


@registry.job("h.ok")
def ok(payload: Any, ctx: Any) -> None:
    pass


@registry.job("h.fail", max_attempts=2, backoff=Backoff(base=60.0, cap=60.0, jitter=False))
def fail(payload: Any, ctx: Any) -> None:
    raise RuntimeError("fails")


@registry.job("h.perm", max_attempts=1)
def perm(payload: Any, ctx: Any) -> None:
    raise RuntimeError("fails on its only attempt")


def _push(db_url: str, *names: str) -> None:
    conn = raw_connect(db_url)
    try:
        for name in names:
            push(conn, Job(name, {}, queue=Q))
        conn.commit()
    finally:
        conn.close()


def _samples(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(exporter.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_worker_given_the_exporter_counts_what_its_policy_decided(
    database: Database, db_url: str
) -> None:
    _push(db_url, "h.ok", "h.ok", "h.fail", "h.perm")
    exporter = Exporter(database, "worker", queues=[Q], jobs=registry)
    try:
        with Worker(database, registry, WorkerConfig(queues={Q: 4}), hooks=exporter) as w:
            assert w.run_once() == 4
        got = _samples(exporter)
    finally:
        exporter.stop()
    def count(name: str, job: str) -> float:
        return got.get((name, (("job", job), ("queue", Q))), 0.0)
    assert count("outbox_jobs_succeeded_total", "h.ok") == 2
    assert count("outbox_jobs_failed_total", "h.fail") == 1
    assert count("outbox_jobs_retried_total", "h.fail") == 1
    assert count("outbox_jobs_dead_total", "h.perm") == 1
    assert count("outbox_jobs_retried_total", "h.perm") == 0


def test_the_oldest_ready_age_is_read_by_the_database_clock(
    database: Database, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker host whose clock runs an hour ahead still reports a fresh job as fresh."""
    _push(db_url, "h.ok")
    ahead = time.time() + 3600
    monkeypatch.setattr("outbox.metrics.time.time", lambda: ahead)
    exporter = Exporter(database, "worker", queues=[Q])
    try:
        age = _samples(exporter)[("outbox_queue_oldest_ready_age_seconds", (("queue", Q),))]
    finally:
        exporter.stop()
    assert 0 <= age < 60
