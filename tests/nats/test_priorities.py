"""Priorities on JetStream against a real nats-server: one subject per band in the
queue's stream, workers fetching from the most urgent band with work; a stream made
before priorities still takes every job (on band 0); a dead letter re-driven keeps
its band."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from outbox import Job, record
from outbox.db.connection import Database
from outbox.jetstream import admin, names
from outbox.jetstream.connect import Broker, parse_url
from tests.fixtures.databases import raw_connect
from tests.nats import support
from tests.nats.servers import run
from tests.nats.test_worker_jetstream import db, ledger, work  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("ledger")


def _record(url: str, queue: str, jobs: list[tuple[str, int]]) -> list[str]:
    """Record ``(job name, priority)`` each, in order; return their message ids."""
    conn = raw_connect(url)
    try:
        ids = [
            record(conn, f"{queue}:{i}", Job(name, {"i": i}, queue=queue, priority=p))
            for i, (name, p) in enumerate(jobs)
        ]
        conn.commit()
        return ids
    finally:
        conn.close()


def _relay(database: Database, nats_url: str) -> None:
    with support.relay(database, nats_url) as relay:
        relay.run()


def _order(ledger_path: Path) -> list[str]:
    return [ln.split()[0] for ln in ledger_path.read_text().splitlines() if ln.endswith(" ran")]


def test_under_a_backlog_the_most_urgent_jobs_start_first(
    db: tuple[Database, str], nats_url: str, ledger: Path  # noqa: F811
) -> None:
    """Recorded least urgent first (so the stream holds them in that order); one worker,
    one slot and one prefetched: the jobs run band by band, most urgent first."""
    queue = support.queue_name("prio")
    plan = [("t.ok", 9 - i // 3) for i in range(30)]
    ids = _record(db[1], queue, plan)
    _relay(db[0], nats_url)
    priority = dict(zip(ids, (p for _, p in plan), strict=True))
    stats = work(nats_url, queue, concurrency=1, prefetch=1)
    assert stats.succeeded == 30
    ran = [priority[m] for m in _order(ledger)]
    assert ran == sorted(ran), ran  # without bands this would be 9, 9, 9, 8, ...
    assert support.stream_count(nats_url, names.stream(queue)) == 0


def test_a_stream_made_before_priorities_takes_every_job_on_band_zero(
    db: tuple[Database, str], nats_url: str, ledger: Path  # noqa: F811
) -> None:
    queue = support.queue_name("old")

    async def old_streams(js: Any) -> None:
        for name, subject, retention in (
            (names.stream(queue), names.subject(queue), RetentionPolicy.WORK_QUEUE),
            (names.dead_stream(queue), names.dead_subject(queue), RetentionPolicy.LIMITS),
        ):
            await js.add_stream(
                StreamConfig(
                    name=name, subjects=[subject], retention=retention, storage=StorageType.FILE
                )
            )

    run(nats_url, old_streams)
    ids = _record(db[1], queue, [("t.ok", 5), ("t.ok", 0)])
    _relay(db[0], nats_url)
    assert support.stream_count(nats_url, names.stream(queue)) == 2
    stats = work(nats_url, queue)
    assert stats.succeeded == 2 and sorted(_order(ledger)) == sorted(ids)


def test_a_dead_letter_re_driven_keeps_its_band(
    db: tuple[Database, str], nats_url: str  # noqa: F811
) -> None:
    queue = support.queue_name("band")
    [message_id] = _record(db[1], queue, [("t.perm", 3)])
    _relay(db[0], nats_url)
    assert work(nats_url, queue).dead == 1
    with Broker(parse_url(nats_url)) as broker:
        assert admin.retry(broker, message_id) == 1

    async def subjects(js: Any) -> list[str]:
        info = await js.stream_info(names.stream(queue))
        return [
            (await js.get_msg(names.stream(queue), seq)).subject
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]

    assert run(nats_url, subjects) == [names.subject(queue, 3)] == [f"outbox.prio.3.{queue}"]
