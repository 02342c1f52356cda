"""Jobs a JetStream worker fetched but never started, against a real nats-server.

JetStream counts every delivery, so a job handed back unstarted (a graceful stop, a
``max_jobs`` limit) must have that delivery taken off its attempt, or a job on its last
attempt is dead-lettered without ever running; and a lane must not fetch past what it
may start (the ordered lane held a request open on every partition whatever its cap).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from outbox import Job, record
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.jetstream import names
from outbox.jetstream.connect import parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.job import ordering_digest
from outbox.queue.config import WorkerConfig, WorkerStats
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.fixtures.processes import wait_until
from tests.nats import app, support


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    path.touch()
    monkeypatch.setenv("NATS_TEST_LEDGER", str(path))
    return path


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
    return db, url


def _runs(ledger: Path, what: str) -> Counter[str]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return Counter(p[0] for p in lines if p[3] == what)


def _keys_of_distinct_partitions(n: int) -> list[str]:
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < n:
        part = names.partition(ordering_digest(f"order:{i}"))
        keys.setdefault(part, f"order:{i}")
        i += 1
    return list(keys.values())


def _hand_off(db: tuple[Database, str], nats_url: str, jobs: list[Job]) -> list[str]:
    database, url = db
    conn = raw_connect(url)
    try:
        ids = [record(conn, f"r{i}", job) for i, job in enumerate(jobs)]
        conn.commit()
    finally:
        conn.close()
    with support.relay(database, nats_url) as relay:
        relay.run()
    return ids


def _stopped_after_one_start(nats_url: str, queue: str, ledger: Path, **kw: Any) -> WorkerStats:
    """A worker (one slot) stopped gracefully once its first job started."""
    config = WorkerConfig(queues={queue: None}, sleep=0.2, lease=30.0, grace=10.0, **kw)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(worker.run)
        wait_until(lambda: sum(_runs(ledger, "start").values()) == 1, 30, "a job to start")
        worker.stop()
        return running.result(timeout=30)


def _drain(nats_url: str, queue: str) -> WorkerStats:
    config = WorkerConfig(
        queues={queue: None}, sleep=0.2, lease=30.0, concurrency=4, stop_when_empty=True
    )
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(worker.run).result(timeout=60)


def test_jobs_released_at_a_graceful_stop_spend_no_attempt(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """max_attempts=1 jobs prefetched, then a graceful stop: the restart runs them."""
    queue = support.queue_name()
    jobs = [Job("t.slow", {"s": 1.0}, queue=queue, max_attempts=1) for _ in range(3)]
    ids = _hand_off(sqlite_db, nats_url, jobs)
    stopped = _stopped_after_one_start(nats_url, queue, ledger, prefetch=2)
    assert stopped.released == 2 and stopped.succeeded == 1
    again = _drain(nats_url, queue)
    assert again.dead == 0 and again.succeeded == 2
    assert _runs(ledger, "ran") == {i: 1 for i in ids}
    assert support.stream_count(nats_url, names.dead_stream(queue)) <= 0


def test_the_ordered_lane_fetches_no_more_than_its_slots_and_a_stop_costs_no_attempt(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """Keyed max_attempts=1 jobs on three partitions, one slot: only the running one is
    fetched, so a graceful stop releases nothing, and the restart runs all three."""
    queue = support.queue_name()
    jobs = [
        Job("t.slow", {"s": 1.0}, queue=queue, max_attempts=1, ordering_key=key)
        for key in _keys_of_distinct_partitions(3)
    ]
    ids = _hand_off(sqlite_db, nats_url, jobs)
    stopped = _stopped_after_one_start(nats_url, queue, ledger)
    assert stopped.released == 0 and stopped.succeeded == 1
    again = _drain(nats_url, queue)
    assert again.dead == 0 and again.succeeded == 2
    assert _runs(ledger, "ran") == {i: 1 for i in ids}
