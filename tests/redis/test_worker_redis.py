"""The worker on Redis Streams against the real server: every job once and the streams
emptied, retries with the job's backoff then a dead letter with class, message and trace,
a foreign entry parked on the dead stream, snoozes that spend no attempt, bands most
urgent first, a stream deleted under a running worker, a paused queue, and the per-job
log lines of the SQL worker."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox import Registry
from outbox.errors import BrokerError
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.redis import names
from outbox.queue.redis.connect import parse_url
from outbox.queue.redis.worker import RedisWorker
from tests.nats import app
from tests.redis import entries

rq, locked_redis, ledger = entries.rq, entries.locked_redis, entries.ledger  # fixtures, by name




def runs(ledger: Path, what: str = "ran") -> Counter[str]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return Counter(p[0] for p in lines if p[3] == what)


def attempts(ledger: Path, message_id: str) -> list[int]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return [int(p[1]) for p in lines if p[0] == message_id and p[3] == "ran"]


def worker(queue: str, **kw: Any) -> RedisWorker:
    settings: dict[str, Any] = {"sleep": 0.2, "lease": 2.0, "stop_when_empty": True, **kw}
    return RedisWorker(
        parse_url(entries.URL), app.registry, WorkerConfig(queues={queue: None}, **settings)
    )


def work(queue: str, **kw: Any) -> WorkerStats:
    with ThreadPoolExecutor(1) as pool:  # a loop of its own, off the test's thread
        return pool.submit(worker(queue, **kw).run).result()


def work_until(queue: str, done: Any, **kw: Any) -> WorkerStats:
    """``stop_when_empty`` workers one after another until ``done()`` (a retry waits in
    the delayed set, which an empty check does not wait for)."""
    total = WorkerStats()
    for _ in range(20):
        stats = work(queue, **kw)
        for f in ("claimed", "succeeded", "retried", "dead", "snoozed"):
            setattr(total, f, getattr(total, f) + getattr(stats, f))
        if done():
            break
        time.sleep(0.1)
    return total


def test_every_job_runs_once_and_the_acks_empty_the_streams(rq: Any, ledger: Path) -> None:
    r, queue = rq
    ids = entries.add_jobs(r, queue, 30)
    stats = work(queue, concurrency=4, prefetch=4)
    assert stats.succeeded == 30 and stats.graceful
    assert runs(ledger) == {i: 1 for i in ids}
    assert entries.left(r, queue) == 0  # XACK + XDEL: nothing stays behind
    assert r.xpending(names.stream(queue), names.GROUP)["pending"] == 0


def test_a_failing_job_is_retried_with_its_backoff_then_dead_lettered(
    rq: Any, ledger: Path
) -> None:
    r, queue = rq
    fail_id = entries.add_job(r, queue, "t.fail")
    perm_id = entries.add_job(r, queue, "t.perm")
    with capture_logs() as logs:
        work_until(queue, lambda: len(entries.dead(r, queue)) == 2)
    assert attempts(ledger, fail_id) == [1, 2]  # max_attempts=2, the second after the backoff
    assert attempts(ledger, perm_id) == [1]  # PermanentFailure: at once
    dead = {d["message_id"]: d for d in entries.dead(r, queue)}
    assert dead[fail_id]["exception_class"] == "RuntimeError" and dead[fail_id]["attempts"] == 2
    assert dead[fail_id]["exception_message"] == "secret-exception-text"
    assert "Traceback" in dead[fail_id]["exception_trace"]
    assert dead[perm_id]["exception_class"] == "outbox.errors.PermanentFailure"
    assert entries.left(r, queue) == 0
    lines = [e for e in logs if e["event"] in ("job.retry", "job.dead")]
    assert [(e["event"], e["attempt"]) for e in lines if e["message_id"] == fail_id] == [
        ("job.retry", 1),
        ("job.dead", 2),
    ]
    assert all(e["worker_id"] and "secret" not in str(e) for e in lines)
    stopped = [e for e in logs if e["event"] == "worker.stopped"]
    assert stopped and all(e["worker_id"] and "outcome" in e for e in stopped)


@pytest.mark.parametrize(
    "fields",
    [
        {"hello": "world"},  # no headers of ours at all
        {"Outbox-Message-Id": "not-a-uuid", "Outbox-Job": "t.ok", "data": "{}"},
        {"data": b"\xff\xfe not json"},
    ],
)
def test_an_entry_that_is_not_ours_is_parked_on_the_dead_stream_and_the_worker_goes_on(
    rq: Any, ledger: Path, fields: dict[str, Any]
) -> None:
    r, queue = rq
    r.xadd(names.stream(queue), fields)
    ok_id = entries.add_job(r, queue, "t.ok")
    stats = work(queue)
    assert runs(ledger) == {ok_id: 1}
    [parked] = entries.dead(r, queue)
    assert parked["exception_class"] == "outbox.jetstream.ForeignMessage"
    assert stats.dead == 1 and entries.left(r, queue) == 0  # parked once, never retried


def test_a_snooze_comes_back_later_without_spending_an_attempt(rq: Any, ledger: Path) -> None:
    r, queue = rq
    job_id = entries.add_job(r, queue, "t.plan", {"plan": ["snooze", "snooze", "ok"], "s": 0.1})
    stats = work_until(queue, lambda: runs(ledger, "ok")[job_id] == 1)
    assert stats.snoozed == 2 and entries.left(r, queue) == 0
    lines = [line.split() for line in ledger.read_text().splitlines()]
    assert {int(p[1]) for p in lines if p[0] == job_id} == {1}  # every run is attempt 1


def test_the_most_urgent_band_runs_first(rq: Any, ledger: Path) -> None:
    r, queue = rq
    low = [entries.add_job(r, queue, "t.ok", {"i": i}, priority=9) for i in range(5)]
    high = [entries.add_job(r, queue, "t.ok", {"i": i}, priority=0) for i in range(5)]
    work(queue, concurrency=1, prefetch=1)
    order = [line.split()[0] for line in ledger.read_text().splitlines()]
    assert order == high + low


def test_a_job_handed_off_before_it_is_due_waits_without_spending_an_attempt(
    rq: Any, ledger: Path
) -> None:
    r, queue = rq
    due = int(time.time() * 1000) + 600
    job_id = entries.add_job(r, queue, "t.ok", available_at_ms=due)
    work_until(queue, lambda: runs(ledger)[job_id] == 1)
    assert attempts(ledger, job_id) == [1]
    assert entries.left(r, queue) == 0


def test_a_stream_deleted_under_a_running_worker_is_made_again_and_work_goes_on(
    rq: Any, ledger: Path
) -> None:
    r, queue = rq
    w = worker(queue, stop_when_empty=False, sleep=0.1)
    with ThreadPoolExecutor(1) as pool, capture_logs() as logs:
        done = pool.submit(w.run)
        first = entries.add_job(r, queue, "t.ok")
        _until(lambda: runs(ledger)[first] == 1)
        for stream in names.job_streams(queue):
            r.delete(stream)
        time.sleep(0.3)
        second = entries.add_job(r, queue, "t.ok")
        _until(lambda: runs(ledger)[second] == 1)
        w.stop()
        stats = done.result(timeout=10)
    assert stats.succeeded == 2 and stats.graceful
    assert any(e["event"] == "worker.group_recreated" for e in logs)


def test_a_paused_queue_gives_nothing_until_resumed(rq: Any, ledger: Path) -> None:
    r, queue = rq
    r.set(names.paused_key(queue), "1")
    job_id = entries.add_job(r, queue, "t.ok")
    w = worker(queue, stop_when_empty=False, sleep=0.1)
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(w.run)
        time.sleep(0.6)
        assert runs(ledger)[job_id] == 0
        r.delete(names.paused_key(queue))
        _until(lambda: runs(ledger)[job_id] == 1)
        w.stop()
        done.result(timeout=10)


def test_sync_jobs_queued_behind_a_busy_thread_wait_on_a_pause_and_run_on_resume(
    rq: Any,
) -> None:
    """One slot: the job running holds the thread while the three fetched with it are
    queued behind it (as the SQL worker buffers its claim). A pause seen meanwhile takes
    them back unstarted: when the running job ends, the next does not start (the ack of
    the one that ended goes out after the thread would have taken the next); on resume
    they run."""
    r, queue = rq
    registry, release, ran = Registry(), threading.Event(), []

    @registry.job("t.hold")
    def hold(payload: Any, ctx: Any) -> None:
        ran.append("hold")
        release.wait(30)

    @registry.job("t.next")
    def after(payload: Any, ctx: Any) -> None:
        ran.append(payload["i"])

    entries.add_job(r, queue, "t.hold")
    for i in range(3):
        entries.add_job(r, queue, "t.next", {"i": i})
    config = WorkerConfig(queues={queue: 1}, sleep=0.1, lease=5.0)
    w = RedisWorker(parse_url(entries.URL), registry, config)
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(w.run)
        try:
            _until(lambda: ran == ["hold"] and w.stats.claimed == 4)  # 3 queued behind it
            r.set(names.paused_key(queue), "1")
            _until(lambda: queue in w.ctx.paused)
            release.set()
            _until(lambda: r.xlen(names.stream(queue)) == 3)  # its ack went out
            assert ran == ["hold"]
            r.delete(names.paused_key(queue))
            _until(lambda: sorted(ran[1:]) == [0, 1, 2])
        finally:
            release.set()
            w.stop()
            done.result(timeout=10)
    assert ran[1:] == [0, 1, 2]  # in their order
    assert entries.left(r, queue) == 0


@pytest.mark.parametrize("password", ["hunter2-secret", None])
def test_a_wrong_or_missing_password_is_one_line_naming_the_url_without_it(
    locked_redis: int, password: str | None
) -> None:
    login = f":{password}@" if password else ""
    url = parse_url(f"redis://{login}127.0.0.1:{locked_redis}/0")
    w = RedisWorker(url, app.registry, WorkerConfig(queues={"q": None}, stop_when_empty=True))
    with pytest.raises(BrokerError) as caught:
        w.run()
    message = str(caught.value)
    assert f"127.0.0.1:{locked_redis}/0" in message and "authentication failed" in message
    assert "hunter2" not in message and "\n" not in message


def test_the_right_password_from_the_environment_connects(
    locked_redis: int, monkeypatch: pytest.MonkeyPatch, ledger: Path
) -> None:
    monkeypatch.setenv("OUTBOX_REDIS_PASSWORD", entries.PASSWORD)
    url = parse_url(f"redis://127.0.0.1:{locked_redis}/0")
    assert url.password == entries.PASSWORD and entries.PASSWORD not in url.shown
    config = WorkerConfig(queues={"q": None}, stop_when_empty=True, sleep=0.1)
    assert RedisWorker(url, app.registry, config).run().graceful


def _until(done: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)

