"""Ordering keys on Redis Streams, against the real server (127.0.0.1:6379, a queue of
each test's own): a key's retry and snooze hold its line (the snooze spends no attempt),
a held retry is taken first by another worker, a dead letter releases the key, a job
handed back unstarted keeps its place, two workers racing over many keys never run a key
out of order or two of its jobs at once, a key in two queues is kept per queue (the
relay says so), keyless jobs run beside a held key, and ``dead_letter_holds_key=True``
is refused. The relay's side (partitions, commit order, a full stream) is in
``test_relay.py``; SIGKILLed worker processes are ``test_ordering_processes.py``."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox import Backoff, Job, Registry
from outbox.db.connection import Database
from outbox.errors import ConfigurationError
from outbox.jetstream import codec
from outbox.job import ordering_digest
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.redis import control, names
from outbox.queue.redis.connect import parse_url
from outbox.queue.redis.worker import RedisWorker
from outbox.relay import Relay, RelayConfig
from outbox.relay.redis import RedisSettings, RedisTarget
from tests.fixtures.processes import wait_until
from tests.nats import app
from tests.nats import test_ordering as on_nats
from tests.nats.test_ordering import _keyed, _lines, _record
from tests.redis import entries

rq, ledger, sqlite_db = entries.rq, entries.ledger, on_nats.sqlite_db  # fixtures, by name


def _relay(db: Database) -> Relay:
    target = RedisTarget(parse_url(entries.URL), RedisSettings(in_flight=1), reconnect_max=5.0)
    return Relay(db, RelayConfig(batch_size=100, reconnect_max=5.0), target=target)


def _hand_off(db: Database) -> None:
    with _relay(db) as relay:
        relay.run()


class Running:
    """A Redis worker on a thread of its own, stopped gracefully at the end."""

    def __init__(self, queue: str, registry: Registry = app.registry, **kw: Any) -> None:
        settings: dict[str, Any] = {"sleep": 0.2, "lease": 2.0, **kw}
        config = WorkerConfig(queues={queue: None}, **settings)
        self.worker = RedisWorker(parse_url(entries.URL), registry, config)
        self.stats: WorkerStats | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.stats = self.worker.run()

    def stop(self) -> WorkerStats:
        self.worker.stop()
        self.thread.join(30)
        assert self.stats is not None, "the worker did not stop"
        return self.stats


def _ended(ledger: Path, ids: list[str]) -> Callable[[], bool]:
    return lambda: set(ids) <= {m for m, _, what in _lines(ledger) if what in ("ok", "ran")}


def test_a_keyed_retry_and_snooze_hold_the_line_and_the_snooze_spends_no_attempt(
    sqlite_db: tuple[Database, str], rq: Any, ledger: Path
) -> None:
    db, url = sqlite_db
    r, queue = rq
    plan = {"plan": ["fail", "snooze", "snooze", "ok"], "s": 0.3}
    jobs = [Job("t.plan", plan, queue=queue, ordering_key="order:p"),
            Job("t.ok", {}, queue=queue, ordering_key="order:p")]  # fmt: skip
    first, second = _record(url, [("p0", jobs[0]), ("p1", jobs[1])])
    _hand_off(db)
    w = Running(queue, concurrency=4)  # free slots: it would run the second at once
    wait_until(_ended(ledger, [first, second]), 30, "both jobs to end")
    stats = w.stop()
    lines = _lines(ledger)
    assert [(a, what) for m, a, what in lines if m == first] == [
        ("1", "fail"), ("2", "snooze"), ("2", "snooze"), ("2", "ok")]  # fmt: skip
    assert [m for m, _, _ in lines] == [first] * 4 + [second]  # nothing of its key between
    assert (stats.retried, stats.snoozed, stats.dead) == (1, 2, 0)
    assert entries.left(r, queue) == 0 and r.hlen(names.held_key(queue)) == 0


def test_a_held_retry_is_taken_first_by_another_worker(rq: Any) -> None:
    """The worker that failed the key's first job stops while its backoff runs: the job
    stays its partition's one delivery out, and the next worker runs it (attempt 2)
    before the key's second job."""
    r, queue = rq
    registry, ran = Registry(), []

    @registry.job("t.hold", max_attempts=3, backoff=Backoff(base=1.0, cap=1.0, jitter=False))
    def hold(payload: Any, ctx: Any) -> None:
        ran.append((payload["seq"], ctx.attempt))
        if ctx.attempt == 1 and payload["seq"] == 0:
            raise RuntimeError("planned failure")

    for seq in range(2):
        _add_keyed(r, queue, "order:h", "t.hold", {"seq": seq})
    w = Running(queue, registry)
    wait_until(lambda: r.hlen(names.held_key(queue)) == 1, 30, "the retry to be held")
    w.stop()
    assert ran == [(0, 1)]
    w = Running(queue, registry)
    wait_until(lambda: len(ran) == 3, 30, "both jobs to end")
    w.stop()
    assert ran == [(0, 1), (0, 2), (1, 1)]
    assert entries.left(r, queue) == 0 and r.hlen(names.held_key(queue)) == 0


def test_a_dead_lettered_keyed_job_releases_its_key(
    sqlite_db: tuple[Database, str], rq: Any, ledger: Path
) -> None:
    db, url = sqlite_db
    r, queue = rq
    jobs = [Job("t.perm", {}, queue=queue, ordering_key="order:d"),
            Job("t.ok", {}, queue=queue, ordering_key="order:d")]  # fmt: skip
    dead, after = _record(url, [("d0", jobs[0]), ("d1", jobs[1])])
    _hand_off(db)
    w = Running(queue)
    wait_until(_ended(ledger, [after]), 30, "the key's second job to run")
    stats = w.stop()
    assert [m for m, _, what in _lines(ledger) if what == "ran"] == [dead, after]
    assert stats.dead == 1 and [d["message_id"] for d in entries.dead(r, queue)] == [dead]
    assert entries.left(r, queue) == 0
    # Re-driven, it goes back into its key's line (its partition), not a band stream
    assert asyncio.run(control.retry(parse_url(entries.URL), dead)) == 1
    assert [r.xlen(s) for s in names.band_streams(queue)] == [0] * len(names.BANDS)
    assert sum(r.xlen(s) for s in names.ordered_streams(queue)) == 1
    w = Running(queue)
    ran = lambda: [m for m, _, what in _lines(ledger) if what == "ran"]  # noqa: E731
    wait_until(lambda: len(ran()) == 3, 30, "the re-driven job to run")
    w.stop()
    assert ran() == [dead, after, dead]


def test_a_keyed_job_handed_back_unstarted_keeps_its_place_and_its_attempt(
    rq: Any, ledger: Path
) -> None:
    """A keyed entry not yet due (handed off early) is handed back: it stays first in its
    partition, and runs before the key's later job once due, at attempt 1."""
    r, queue = rq
    due_ms = int(time.time() * 1000) + 700
    early = _add_keyed(r, queue, "order:e", "t.ok", available_at_ms=due_ms)
    later = _add_keyed(r, queue, "order:e", "t.ok")
    w = Running(queue)
    wait_until(_ended(ledger, [early, later]), 30, "both jobs to end")
    w.stop()
    assert [(m, a) for m, a, _ in _lines(ledger)] == [(early, "1"), (later, "1")]
    assert entries.left(r, queue) == 0


def test_keyless_jobs_run_beside_a_key_waiting_for_its_backoff(rq: Any, ledger: Path) -> None:
    r, queue = rq
    slow = Registry()
    ran: list[str] = []

    @slow.job("t.wait", max_attempts=3, backoff=Backoff(base=1.5, cap=1.5, jitter=False))
    def wait(payload: Any, ctx: Any) -> None:
        ran.append(f"{payload['k']}{ctx.attempt}")
        if payload["k"] == "key" and ctx.attempt == 1:
            raise RuntimeError("planned failure")

    _add_keyed(r, queue, "order:w", "t.wait", {"k": "key"})
    w = Running(queue, slow)
    wait_until(lambda: ran == ["key1"], 30, "the keyed job's first attempt")
    for i in range(3):
        entries.add_job(r, queue, "t.wait", {"k": f"plain{i}-"})
    wait_until(lambda: len(ran) == 5, 30, "every run")
    w.stop()
    assert ran[-1] == "key2"  # the plain ones ran during its backoff


def test_two_workers_over_many_keys_run_each_key_in_order_one_at_a_time(rq: Any) -> None:
    r, queue = rq
    registry, spans, lock = Registry(), [], threading.Lock()

    @registry.job("t.span", max_attempts=10, backoff=app.QUICK)
    def span(payload: Any, ctx: Any) -> None:
        began = time.monotonic()
        time.sleep(0.003)
        if payload["seq"] % 7 == 3 and ctx.attempt == 1:
            raise RuntimeError("planned failure")
        with lock:
            spans.append((payload["key"], payload["seq"], began, time.monotonic()))

    keys, per_key = 12, 10
    for seq, k in itertools.product(range(per_key), range(keys)):
        _add_keyed(r, queue, f"order:{k}", "t.span", {"key": k, "seq": seq})
    workers = [Running(queue, registry, concurrency=4) for _ in range(2)]
    wait_until(lambda: len(spans) == keys * per_key, 60, "every job to end")
    for w in workers:
        w.stop()
    for k in range(keys):
        mine = sorted((b, e, s) for key, s, b, e in spans if key == k)
        assert [s for _, _, s in mine] == list(range(per_key))
        assert all(e <= b2 for (_, e, _), (b2, _, _) in itertools.pairwise(mine))
    assert entries.left(r, queue) == 0 and r.hlen(names.held_key(queue)) == 0


def test_a_key_in_two_queues_is_kept_per_queue_and_said_by_the_relay(
    sqlite_db: tuple[Database, str], ledger: Path
) -> None:
    """As on JetStream: each queue has its own partitions, so a key's jobs are in order
    within each queue; the relay logs relay.ordering_key_queues (counts and queues, never
    a key) for a batch that puts a key in another queue than the one it last went to."""
    db, url = sqlite_db
    r = entries.client()
    q1, q2 = entries.queue_name(), entries.queue_name()
    try:
        a = _record(url, [(f"a{i}", j) for i, j in enumerate(_keyed(q1, "order:two", 3))])
        with _relay(db) as relay, capture_logs() as logs:
            relay.run()
            assert not [e for e in logs if e["event"] == "relay.ordering_key_queues"]
            b = _record(url, [(f"b{i}", j) for i, j in enumerate(_keyed(q2, "order:two", 3))])
            relay.run()
        (warned,) = [e for e in logs if e["event"] == "relay.ordering_key_queues"]
        assert (warned["keys"], warned["queues"]) == (1, sorted([q1, q2]))
        assert "order:" not in str(warned) and ordering_digest("order:two") not in str(warned)
        part = names.partition(ordering_digest("order:two"))
        for q, ids in ((q1, a), (q2, b)):
            found = [f[codec.MESSAGE_ID.encode()].decode()
                     for _, f in r.xrange(names.ordered_stream(q, part))]  # fmt: skip
            assert found == ids
        workers = [Running(q) for q in (q1, q2)]
        wait_until(_ended(ledger, a + b), 30, "every job to end")
        for w in workers:
            w.stop()
        lines = [m for m, _, _ in _lines(ledger)]
        assert [m for m in lines if m in a] == a and [m for m in lines if m in b] == b
    finally:
        for q in (q1, q2):
            entries.drop(r, q)
        r.close()


def test_dead_letter_holds_key_is_refused_by_the_redis_worker_in_one_line() -> None:
    registry = Registry()

    @registry.job("t.held", dead_letter_holds_key=True)
    def held(payload: Any, ctx: Any) -> None:
        raise AssertionError("never runs")

    with pytest.raises(ConfigurationError, match="dead_letter_holds_key=True"):
        RedisWorker(parse_url(entries.URL), registry, WorkerConfig(queues={"q": None}))


def _add_keyed(
    r: Any, queue: str, key: str, job: str, payload: Any = None, available_at_ms: int = 0
) -> str:
    """One keyed job entry on its key's partition, as the relay XADDs it; its id."""
    message_id = entries.add_job(r, queue, job, payload, available_at_ms=available_at_ms)
    band0 = names.stream(queue)
    ((entry_id, fields),) = r.xrevrange(band0, count=1)
    r.xdel(band0, entry_id)
    part = names.partition(ordering_digest(key))
    r.xadd(names.ordered_stream(queue, part), fields)
    return message_id

