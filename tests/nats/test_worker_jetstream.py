"""The worker on JetStream against a real nats-server: ack, NAK with backoff, dead
letters and re-drive, foreign messages, a worker SIGKILLed mid-job, graceful and hard
stops, the per-queue cap over sync and async handlers, in-progress acks as the lease
(for jobs waiting for a slot too), snoozes and their cap, a sync handler's timeout, the
refused transactional handler; jobs handed back unstarted (a graceful stop) spend no
attempt, and the lane of keyed jobs fetches no more than its free slots."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from outbox import Job, Registry, record
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import BrokerError, ConfigurationError
from outbox.jetstream import admin, codec, names
from outbox.jetstream.connect import Broker, parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.job import ordering_digest
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.control import MAX_SNOOZES, SNOOZE_LIMIT
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.fixtures.fault_harness import cli_argv, spawn
from tests.fixtures.processes import wait_until
from tests.nats import app, support
from tests.nats.servers import run


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    path.touch()
    monkeypatch.setenv("NATS_TEST_LEDGER", str(path))
    return path


@pytest.fixture
def db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    database = Database(url)
    with database.connect() as c:
        migrate(c)
    return database, url


def runs(ledger: Path, what: str = "ran") -> Counter[str]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return Counter(parts[0] for parts in lines if parts[3] == what)


def handed_off(
    db: tuple[Database, str], nats_url: str, queue: str, n: int, job: str, payload: Any = None
) -> list[str]:
    database, url = db
    ids = support.record_jobs(url, queue, n, job=job, payload=payload)
    with support.relay(database, nats_url) as relay:
        relay.run()
    return ids


def work(nats_url: str, queue: str, **kw: Any) -> Any:
    settings: dict[str, Any] = {"sleep": 0.2, "lease": 2.0, "stop_when_empty": True, **kw}
    config = WorkerConfig(queues={queue: None}, **settings)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    # on a thread of its own: an earlier test may have left the main thread's loop running
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(worker.run).result()


def work_until(nats_url: str, queue: str, done: Callable[[], bool], **kw: Any) -> WorkerStats:
    """Run ``stop_when_empty`` workers one after another until ``done()`` (at most 10): a
    job NAKed or snoozed for later is not deliverable when one checks for an empty
    queue. The stats are summed."""
    total = WorkerStats()
    for _ in range(10):
        stats = work(nats_url, queue, **kw)
        for field in ("succeeded", "retried", "dead", "snoozed", "timed_out"):
            setattr(total, field, getattr(total, field) + getattr(stats, field))
        if done():
            break
    return total


def worker_process(db_url: str, queue: str, nats_url: str, ledger: Path, *extra: str) -> Any:
    """``outbox worker QUEUE --broker`` as a real process running the tests' app."""
    argv = cli_argv(
        db_url, "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url, *extra
    )
    return spawn(argv, {"NATS_TEST_LEDGER": str(ledger)})


def dead_letters(nats_url: str, queue: str) -> list[codec.DeadLetter]:
    with Broker(parse_url(nats_url)) as broker:
        return [d for d in admin.failed(broker, 50) if d.queue == queue]


def steps(ledger: Path, message_id: str) -> list[tuple[str, str]]:
    """(attempt, what) of each ledger line of ``message_id``, in order."""
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return [(p[1], p[3]) for p in lines if p[0] == message_id]


def test_worker_runs_every_job_once_and_the_acks_empty_the_stream(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = handed_off(db, nats_url, queue, 30, "t.ok")
    stats = work(nats_url, queue, concurrency=4, prefetch=4)
    assert stats.succeeded == 30 and stats.graceful
    assert runs(ledger) == {i: 1 for i in ids}
    assert support.stream_count(nats_url, names.stream(queue)) == 0  # work-queue retention


def test_failing_job_is_retried_then_dead_lettered_with_class_message_and_trace(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [fail_id] = handed_off(db, nats_url, queue, 1, "t.fail")
    [perm_id] = support.record_jobs(db[1], queue, 1, job="t.perm", prefix="p")
    with support.relay(db[0], nats_url) as relay:
        relay.run()
    stats = work(nats_url, queue, sleep=1.0)
    if stats.dead < 2:  # the NAK's backoff delay outlived the empty check: run again
        stats = work(nats_url, queue, sleep=1.0)
    assert runs(ledger) == {fail_id: 2, perm_id: 1}  # max_attempts=2; permanent at once
    assert support.stream_count(nats_url, names.stream(queue)) == 0
    with Broker(parse_url(nats_url)) as broker:
        dead = {d.message_id: d for d in admin.failed(broker, 50) if d.queue == queue}
        assert set(dead) == {fail_id, perm_id}
        assert dead[fail_id].exception_class == "RuntimeError" and dead[fail_id].attempts == 2
        assert dead[fail_id].body["exception_message"] == "secret-exception-text"
        assert "Traceback" in dead[fail_id].body["exception_trace"]
        assert dead[perm_id].exception_class == "outbox.errors.PermanentFailure"
        # re-drive under a new Nats-Msg-Id: it runs again (a duplicate would be dropped)
        assert admin.retry(broker, perm_id) == 1
        assert support.msg_ids(nats_url, queue)[0] == (
            f"{perm_id}:redrive:{dead[perm_id].seq}",
            perm_id,
        )
        work(nats_url, queue)
        assert runs(ledger)[perm_id] == 2
        assert admin.forget(broker, fail_id) == 1
        assert [d.message_id for d in admin.failed(broker, 50) if d.queue == queue] == [perm_id]


def test_the_worker_logs_each_retry_and_dead_letter_and_its_run_as_the_sql_worker_does(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [fail_id] = handed_off(db, nats_url, queue, 1, "t.fail")
    with capture_logs() as logs:
        work_until(nats_url, queue, lambda: runs(ledger)[fail_id] == 2, sleep=1.0)
    started = [e for e in logs if e["event"] == "worker.started"]
    stopped = [e for e in logs if e["event"] == "worker.stopped"]
    worker_id = started[0]["worker_id"]
    assert worker_id and all(e["worker_id"] for e in started + stopped)
    assert started[0]["encryption"] == "off"  # no keyring here: key ids only, never keys
    assert stopped[-1]["outcome"] == "stopped gracefully"
    assert sum(e["claimed"] for e in stopped) == 2
    assert {"succeeded", "retried", "dead", "released", "lost"} <= set(stopped[-1])
    by_event = {e["event"]: e for e in logs if e["event"] in ("job.retry", "job.dead")}
    for event, attempt in (("job.retry", 1), ("job.dead", 2)):
        line = by_event[event]
        assert line["message_id"] == fail_id and line["queue"] == queue
        assert line["job"] == "t.fail" and line["attempt"] == attempt
        assert line["max_attempts"] == 2 and line["error"] == "RuntimeError"
        assert line["duration_ms"] >= 0 and line["worker_id"]
        assert "secret-exception-text" not in str(line)


def test_a_foreign_message_goes_to_the_dead_letter_stream_and_the_worker_goes_on(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = handed_off(db, nats_url, queue, 3, "t.ok")
    run(nats_url, lambda js: js.publish(names.subject(queue), b"\xff not ours"))
    run(nats_url, lambda js: js.publish(names.subject(queue), b"{}", headers={"Outbox-Job": "x"}))
    stats = work(nats_url, queue)
    assert stats.succeeded == 3 and stats.dead == 2 and stats.graceful
    assert runs(ledger) == {i: 1 for i in ids}
    with Broker(parse_url(nats_url)) as broker:
        dead = [d for d in admin.failed(broker, 50) if d.queue == queue]
    assert [d.exception_class for d in dead] == ["outbox.jetstream.ForeignMessage"] * 2
    assert dead[0].body["payload_encoding"] == "hex"


def test_transactional_handlers_are_refused_on_a_broker(nats_url: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        JetStreamWorker(parse_url(nats_url), app.transactional, WorkerConfig())
    assert "t.tx is transactional" in str(err.value) and "broker" in str(err.value)


def test_a_handler_that_keeps_its_result_is_refused_on_a_broker(nats_url: str) -> None:
    """Its result would be dropped: only the SQL acknowledgement writes one."""
    registry = Registry()
    registry.job("t.kept", keep_result=True)(lambda payload, ctx: 1)
    with pytest.raises(ConfigurationError) as err:
        JetStreamWorker(parse_url(nats_url), registry, WorkerConfig())
    message = str(err.value)
    assert "\n" not in message and "job t.kept keeps its result" in message


def test_global_limits_are_refused_on_a_broker(nats_url: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        JetStreamWorker(parse_url(nats_url), app.limited, WorkerConfig())
    assert "t.limited has a global concurrency or rate limit" in str(err.value)
    with pytest.raises(ConfigurationError) as err:
        config = WorkerConfig(queues={"default": None}, queue_limits={"default": 2})
        JetStreamWorker(parse_url(nats_url), app.registry, config)
    assert "--queue-concurrency" in str(err.value) and "broker" in str(err.value)


@pytest.mark.slow
def test_a_worker_killed_mid_job_has_the_job_redelivered_after_the_ack_wait(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.slow", payload={"s": 2})
    victim = worker_process(db[1], queue, nats_url, ledger, "--lease", "1")
    try:
        wait_until(lambda: runs(ledger, "start")[job_id] == 1, 30, "the job to start")
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
        victim.communicate()
    # the redelivery waits out the 1 s ack wait: run until one job is done (30 s bound)
    stats = work(nats_url, queue, stop_when_empty=False, max_jobs=1, max_time=30)
    assert stats.succeeded == 1
    assert runs(ledger, "start")[job_id] == 2 and runs(ledger)[job_id] == 1
    attempts = [line.split()[1] for line in ledger.read_text().splitlines()]
    assert attempts == ["1", "2", "2"]  # the redelivery is the next attempt


def test_sigterm_lets_the_running_job_finish_and_exits_0(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.slow", payload={"s": 1})
    proc = worker_process(db[1], queue, nats_url, ledger)
    wait_until(lambda: runs(ledger, "start")[job_id] == 1, 30, "the job to start")
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        proc.communicate()
    assert code == 0 and runs(ledger)[job_id] == 1
    assert support.stream_count(nats_url, names.stream(queue)) == 0


def test_a_worker_never_creates_a_stream_and_stops_when_empty_without_one(nats_url: str) -> None:
    queue = support.queue_name()
    stats = work(nats_url, queue)
    assert stats.claimed == 0 and stats.graceful
    assert support.stream_count(nats_url, names.stream(queue)) == -1


def test_in_progress_acks_hold_a_job_longer_than_the_ack_wait(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.slow", payload={"s": 2.5})
    # a free slot would take a redelivery at once: without the heartbeat it would run twice
    stats = work(nats_url, queue, lease=1.0, concurrency=2)
    assert stats.succeeded == 1
    assert runs(ledger, "start") == {job_id: 1} and runs(ledger) == {job_id: 1}


def test_sigterm_naks_fetched_jobs_that_have_not_started_so_another_worker_runs_them_now(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = handed_off(db, nats_url, queue, 3, "t.slow", payload={"s": 1.5})
    proc = worker_process(db[1], queue, nats_url, ledger, "--prefetch", "2")
    try:  # one slot: one job runs, the other two wait fetched in the worker
        wait_until(lambda: sum(runs(ledger, "start").values()) == 1, 30, "a job to start")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    finally:
        proc.kill()
        proc.communicate()
    assert code == 0 and sum(runs(ledger).values()) == 1
    # NAKed at once, not held until the 30 s ack wait: a worker that stops when
    # nothing is deliverable finds both
    stats = work(nats_url, queue, concurrency=2, lease=30.0, max_time=20)
    assert stats.succeeded == 2
    assert runs(ledger) == {i: 1 for i in ids}


def test_a_second_signal_stops_at_once_and_the_running_job_comes_back(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.aslow", payload={"s": 60})
    proc = worker_process(db[1], queue, nats_url, ledger, "--lease", "1", "--grace", "60")
    try:
        wait_until(lambda: runs(ledger, "start")[job_id] == 1, 30, "the job to start")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)  # well inside the 60 s grace
    finally:
        proc.kill()
        proc.communicate()
    assert code == 1 and runs(ledger)[job_id] == 0
    assert support.stream_count(nats_url, names.stream(queue)) == 1  # not acked: it comes back


def test_the_queue_cap_holds_over_sync_and_async_handlers_together(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = support.record_jobs(db[1], queue, 8, job="t.gauge", payload={"s": 0.2})
    ids += support.record_jobs(db[1], queue, 8, job="t.agauge", payload={"s": 0.2}, prefix="a")
    with support.relay(db[0], nats_url) as relay:
        relay.run()
    app.gauge.update(now=0, most=0)
    stats = work(nats_url, queue, concurrency=3, prefetch=8)
    assert stats.succeeded == 16 and stats.graceful
    assert runs(ledger) == {i: 1 for i in ids}
    assert app.gauge["most"] == 3


def test_fetched_jobs_waiting_for_a_slot_keep_their_lease_so_none_runs_twice(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = handed_off(db, nats_url, queue, 4, "t.slow", payload={"s": 1.5})
    # one slot and one job fetched ahead: it waits 1.5 s, past the 1 s ack wait
    settings = {"lease": 1.0, "concurrency": 1, "prefetch": 1}
    with ThreadPoolExecutor(2) as pool:
        both = [pool.submit(work, nats_url, queue, **settings) for _ in range(2)]
        stats = [f.result() for f in both]
    assert runs(ledger, "start") == {i: 1 for i in ids}
    assert sum(s.succeeded for s in stats) == 4


def test_a_snooze_sends_the_job_back_later_without_spending_an_attempt(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    plan = {"plan": ["fail", "snooze", "snooze", "ok"], "s": 0.3}
    [job_id] = handed_off(db, nats_url, queue, 1, "t.plan", payload=plan)
    stats = work_until(nats_url, queue, lambda: runs(ledger, "ok")[job_id] == 1)
    # the failure spent attempt 1; the snoozes gave attempt 2 back each time
    assert steps(ledger, job_id) == [("1", "fail"), ("2", "snooze"), ("2", "snooze"), ("2", "ok")]
    assert (stats.retried, stats.snoozed, stats.succeeded, stats.dead) == (1, 2, 1, 0)
    assert dead_letters(nats_url, queue) == []
    assert support.stream_count(nats_url, names.stream(queue)) == 0


def test_the_snooze_past_the_cap_dead_letters_the_job_as_snooze_limit(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    handed_off(db, nats_url, queue, 1, "t.ok")  # the relay creates the stream
    job_id = str(uuid.uuid4())  # a job snoozed 99 times already, two attempts spent
    headers = codec.job_headers(
        job_id, "t.plan", None, 0, 1, msg_id=f"{job_id}:crafted",
        snoozes=MAX_SNOOZES - 1, attempts_before=2,
    )  # fmt: skip
    body = orjson.dumps({"plan": ["snooze"]})
    run(nats_url, lambda js: js.publish(names.subject(queue), body, headers=headers))
    stats = work_until(nats_url, queue, lambda: bool(dead_letters(nats_url, queue)))
    assert steps(ledger, job_id) == [("3", "snooze"), ("3", "snooze")]  # the 100th, the 101st
    assert (stats.snoozed, stats.dead) == (1, 1)
    [dead] = dead_letters(nats_url, queue)
    assert (dead.message_id, dead.exception_class, dead.attempts) == (job_id, SNOOZE_LIMIT, 3)
    assert support.stream_count(nats_url, names.stream(queue)) == 0


def test_a_sync_handler_past_its_timeout_fails_the_attempt_and_frees_its_slot(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.stuck", payload={"s": 1.5})
    stats = work_until(nats_url, queue, lambda: bool(dead_letters(nats_url, queue)), concurrency=2)
    assert (stats.timed_out, stats.retried, stats.dead, stats.succeeded) == (2, 1, 1, 0)
    [dead] = dead_letters(nats_url, queue)  # max_attempts=2
    assert dead.exception_class == "outbox.queue.execute.JobTimeout" and dead.attempts == 2
    # attempt 2 began while attempt 1's call (1.5 s) still ran: settled at the 0.3 s timeout
    assert steps(ledger, job_id)[:2] == [("1", "start"), ("2", "start")]


def _keys_of_distinct_partitions(n: int) -> list[str]:
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < n:
        part = names.partition(ordering_digest(f"order:{i}"))
        keys.setdefault(part, f"order:{i}")
        i += 1
    return list(keys.values())


def _ours(counts: Counter[str], ids: list[str]) -> dict[str, int]:
    """The counts of ``ids`` only: the thread of an earlier test's timed-out sync handler
    (t.stuck) runs to its end and may write into this test's ledger."""
    return {m: n for m, n in counts.items() if m in ids}


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
        wait_until(lambda: sum(runs(ledger, "start").values()) == 1, 30, "a job to start")
        worker.stop()
        return running.result(timeout=30)


# -- jobs handed back unstarted: JetStream counts every delivery ---------------------


def test_jobs_released_at_a_graceful_stop_spend_no_attempt(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """max_attempts=1 jobs prefetched, then a graceful stop: the restart runs them."""
    queue = support.queue_name()
    jobs = [Job("t.slow", {"s": 1.0}, queue=queue, max_attempts=1) for _ in range(3)]
    ids = _hand_off(db, nats_url, jobs)
    stopped = _stopped_after_one_start(nats_url, queue, ledger, prefetch=2)
    assert stopped.released == 2 and stopped.succeeded == 1
    again = work(nats_url, queue, concurrency=4, lease=30.0)
    assert again.dead == 0 and again.succeeded == 2
    assert _ours(runs(ledger, "ran"), ids) == {i: 1 for i in ids}
    assert support.stream_count(nats_url, names.dead_stream(queue)) <= 0


def test_the_ordered_lane_fetches_no_more_than_its_slots_and_a_stop_costs_no_attempt(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """Keyed max_attempts=1 jobs on three partitions, one slot: only the running one is
    fetched, so a graceful stop releases nothing, and the restart runs all three."""
    queue = support.queue_name()
    jobs = [
        Job("t.slow", {"s": 1.0}, queue=queue, max_attempts=1, ordering_key=key)
        for key in _keys_of_distinct_partitions(3)
    ]
    ids = _hand_off(db, nats_url, jobs)
    stopped = _stopped_after_one_start(nats_url, queue, ledger)
    assert stopped.released == 0 and stopped.succeeded == 1
    again = work(nats_url, queue, concurrency=4, lease=30.0)
    assert again.dead == 0 and again.succeeded == 2
    assert _ours(runs(ledger, "ran"), ids) == {i: 1 for i in ids}


def test_a_queue_that_fails_stops_the_others_gracefully_before_the_error_is_raised(
    db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """Queue ``bad`` gets a stream set up wrongly while ``good``'s job runs: that job
    runs to its end and is acked (the lanes stop together), then the worker raises."""
    good, bad = support.queue_name(), support.queue_name()
    [job_id] = handed_off(db, nats_url, good, 1, "t.slow", payload={"s": 1.5})
    config = WorkerConfig(queues={good: None, bad: None}, sleep=0.1, lease=30.0, grace=10.0)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)

    async def wrong(js: Any) -> None:  # limits, not workqueue: refused
        await js.add_stream(name=names.dead_stream(bad), subjects=[names.dead_subject(bad)])
        await js.add_stream(name=names.stream(bad), subjects=[names.subject(bad)])

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(worker.run)
        wait_until(lambda: runs(ledger, "start")[job_id] == 1, 30, "the job to start")
        run(nats_url, wrong)
        with pytest.raises(BrokerError) as err:
            running.result(timeout=30)
    assert "setting retention" in str(err.value)
    # Its own job only: an earlier test's abandoned handler thread may still write here.
    assert runs(ledger)[job_id] == 1 and worker.stats.succeeded == 1
    assert support.stream_count(nats_url, names.stream(good)) == 0
