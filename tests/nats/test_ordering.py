"""Ordering keys on the broker path, against a real nats-server.

The relay: a keyed intent goes on its key's ordered partition subject, a key's intents
reach the stream in id order even when another batch holds an older one (row locks) or
a publish in the middle of a key is refused; a stream made before ordering keys gets
their subjects under ``--provisioning create`` and is refused in one line under
``require``. The worker: a key's retry and snooze hold its line (the snooze spends no
attempt), a dead letter releases it, and ``dead_letter_holds_key=True`` is refused at
start in one line. The many-process race is tests/reliability/test_ordering_processes.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from outbox import Job, Registry, record
from outbox.cli import main
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import BrokerError, ConfigurationError, TargetRefused
from outbox.jetstream import admin, codec, names, provision
from outbox.jetstream.connect import Broker, parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.job import ordering_digest
from outbox.queue.config import WorkerConfig, WorkerStats
from tests.fixtures import databases as backends
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.fixtures.processes import wait_until
from tests.nats import app, support
from tests.nats.servers import run


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
    return db, url


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    path.touch()
    monkeypatch.setenv("NATS_TEST_LEDGER", str(path))
    return path


def _record(url: str, jobs: list[tuple[str, Job]]) -> list[str]:
    """Record ``(idempotency key, job)`` each, in one transaction; their message ids."""
    conn = raw_connect(url)
    try:
        ids = [record(conn, key, job) for key, job in jobs]
        conn.commit()
        return ids
    finally:
        conn.close()


def _keyed(queue: str, key: str, n: int, payload: Any = None, job: str = "t.ok") -> list[Job]:
    return [
        Job(job, payload if payload is not None else {"i": i}, queue=queue, ordering_key=key)
        for i in range(n)
    ]


def _stream(url: str, queue: str) -> list[tuple[str, str]]:
    """(subject, Outbox-Message-Id) of every message in ``queue``'s stream, in order."""

    async def read(js: Any) -> list[tuple[str, str]]:
        state = (await js.stream_info(names.stream(queue))).state
        out = []
        for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
            msg = await js.get_msg(names.stream(queue), seq)
            out.append((msg.subject, (msg.headers or {}).get(codec.MESSAGE_ID, "")))
        return out

    return run(url, read)


def _dead_stream(url: str, queue: str) -> None:
    async def make(js: Any) -> None:
        await js.add_stream(name=names.dead_stream(queue), subjects=[names.dead_subject(queue)])

    run(url, make)


def _of(stream: list[tuple[str, str]], ids: list[str]) -> list[str]:
    """The message ids of ``ids`` in the order the stream holds them."""
    wanted = set(ids)
    return [m for _, m in stream if m in wanted]


def _old_stream(url: str, queue: str, **settings: Any) -> None:
    """A queue stream as the previous version made it: its bands' subjects only."""
    config = StreamConfig(
        name=names.stream(queue),
        subjects=names.band_subjects(queue),
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        duplicate_window=120.0,
        **settings,
    )

    async def make(js: Any) -> None:
        await js.add_stream(config)

    run(url, make)


# -- the relay ----------------------------------------------------------------------


def test_keyed_intents_go_on_their_partition_in_commit_order_beside_keyless_ones(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    first = _record(url, [(f"a{i}", j) for i, j in enumerate(_keyed(queue, "order:a", 3))])
    plain = support.record_jobs(url, queue, 2)
    mixed = [(f"b{i}", j) for i, j in enumerate(_keyed(queue, "order:b", 2))]
    mixed += [(f"a{i + 3}", j) for i, j in enumerate(_keyed(queue, "order:a", 2))]
    later = _record(url, mixed)
    with support.relay(db, nats_url, batch_size=3) as relay:
        totals = relay.run()
    assert totals.handed_off == 9 and support.outbox_rows(url)[0] == 0
    stream = _stream(nats_url, queue)
    a, b = first + later[2:], later[:2]
    assert _of(stream, a) == a and _of(stream, b) == b  # each key in commit order
    subjects = dict((m, s) for s, m in stream)
    for key, ids in (("order:a", a), ("order:b", b)):
        part = names.partition(str(ordering_digest(key)))  # the key as stored
        assert {subjects[m] for m in ids} == {names.ordered_subject(queue, part)}
    assert {subjects[m] for m in plain} == {names.subject(queue)}


@pytest.mark.parametrize(
    "backend", [b for b in backends.BACKENDS if b != "sqlite"], indirect=True
)
def test_a_key_whose_older_intent_another_batch_holds_waits_for_it(
    database: Database, db_url: str, nats_url: str
) -> None:
    """The older intent is row-locked as another lane's (or relay's) batch would hold it:
    this relay skips it (SKIP LOCKED) and must not publish the key's later ones ahead of
    it; keyless rows and other keys go on. Once the lock is gone they go, in order."""
    queue = support.queue_name()
    k = _record(db_url, [(f"k{i}", j) for i, j in enumerate(_keyed(queue, "order:k", 3))])
    other = _record(db_url, [(f"o{i}", j) for i, j in enumerate(_keyed(queue, "order:o", 2))])
    plain = support.record_jobs(db_url, queue, 2)
    holder = raw_connect(db_url)
    try:
        cur = holder.cursor()
        cur.execute("SELECT id FROM outbox_messages WHERE message_id = %s", (k[0],))
        (row_id,) = cur.fetchone()  # locked by its primary key: that row alone
        cur.execute("SELECT id FROM outbox_messages WHERE id = %s FOR UPDATE", (row_id,))
        # The held row stays held for the whole batch: a relay statement that met it
        # would wait, and on MariaDB the relay's lock wait is cut to 1 s so that such a
        # wait fails the batch at once (lock wait timeout) instead of after 50 s.
        with support.relay(_impatient(database, db_url), nats_url, in_flight=3) as relay:
            batch = relay.run_once()  # run() would wait for the held row, batch after batch
        assert (batch.claimed, batch.handed_off) == (6, 4)
        stream = _stream(nats_url, queue)
        assert _of(stream, k) == []  # the held one, and after it every later one, wait
        assert _of(stream, other) == other and _of(stream, plain) == plain
        assert support.outbox_rows(db_url)[0] == 3
    finally:
        holder.rollback()
        holder.close()
    with support.relay(database, nats_url, in_flight=3) as relay:
        relay.run()
    assert _of(_stream(nats_url, queue), k) == k
    assert support.outbox_rows(db_url)[0] == 0


def _impatient(database: Database, url: str) -> Database:
    """``database``, or on MariaDB the same database with a lock wait of 1 s."""
    if not url.startswith("mysql"):
        return database
    return Database(f"{url}?init_command=SET%20innodb_lock_wait_timeout%3D1")


def test_a_refused_publish_in_a_key_leaves_it_and_every_later_one_pending(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    """The key's second message is too large for the stream: the third, which the stream
    would take, must not go ahead of it. With the limit lifted the next batch publishes
    both, in order."""
    db, url = sqlite_db
    queue = support.queue_name()
    _old_stream(nats_url, queue, max_msg_size=400)
    jobs = _keyed(queue, "order:z", 3)
    jobs[1] = Job("t.ok", {"pad": "x" * 600}, queue=queue, ordering_key="order:z")
    z = _record(url, [(f"z{i}", j) for i, j in enumerate(jobs)])
    plain = support.record_jobs(url, queue, 1)
    with support.relay(db, nats_url) as relay, pytest.raises(TargetRefused) as err:
        relay.run()
    assert err.value.handed_off == 2 and "2 intents stay pending" in str(err.value)
    stream = _stream(nats_url, queue)
    assert _of(stream, z) == z[:1] and _of(stream, plain) == plain
    assert support.outbox_rows(url)[0] == 2

    async def lift(js: Any) -> None:
        info = await js.stream_info(names.stream(queue))
        info.config.max_msg_size = -1
        await js.update_stream(info.config)

    run(nats_url, lift)
    with support.relay(db, nats_url) as relay:
        relay.run()
    assert _of(_stream(nats_url, queue), z) == z
    assert support.outbox_rows(url)[0] == 0


def test_a_stream_made_before_ordering_keys_gets_their_subjects_under_create(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    _old_stream(nats_url, queue)
    plain = support.record_jobs(url, queue, 1)
    z = _record(url, [(f"z{i}", j) for i, j in enumerate(_keyed(queue, "order:z", 2))])
    with support.relay(db, nats_url) as relay:
        relay.run()
    stream = _stream(nats_url, queue)
    assert _of(stream, z) == z and _of(stream, plain) == plain

    async def subjects(js: Any) -> list[str]:
        return list((await js.stream_info(names.stream(queue))).config.subjects or [])

    have = run(nats_url, subjects)
    assert set(names.band_subjects(queue) + names.ordered_subjects(queue)) == set(have)


def test_under_require_a_stream_without_the_ordered_subjects_is_refused_in_one_line(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    _, url = sqlite_db
    queue = support.queue_name()
    _old_stream(nats_url, queue)
    _dead_stream(nats_url, queue)  # require creates neither stream
    support.record_jobs(url, queue, 2)
    _record(url, [("z0", _keyed(queue, "order:z", 1)[0])])
    argv = ["--database-url", url, "relay", "--target", nats_url, "--provisioning", "require"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"lacks {names.ORDERED_SUBJECT}" in lines[0] and "--provisioning create" in lines[0]
    assert support.outbox_rows(url) == (3, 3)  # nothing handed off, nothing lost
    assert support.stream_count(nats_url, names.stream(queue)) == 0  # nothing published


# -- the worker ---------------------------------------------------------------------


def _work(nats_url: str, queue: str, registry: Registry = app.registry) -> WorkerStats:
    config = WorkerConfig(queues={queue: None}, sleep=0.2, lease=2.0, stop_when_empty=True)
    worker = JetStreamWorker(parse_url(nats_url), registry, config)
    with ThreadPoolExecutor(1) as pool:  # the main thread's loop may be taken
        return pool.submit(worker.run).result()


def _lines(ledger: Path) -> list[tuple[str, str, str]]:
    """(message id, attempt, what) of every ledger line, in order."""
    return [(p[0], p[1], p[3]) for p in (line.split() for line in ledger.read_text().splitlines())]


def _until(nats_url: str, queue: str, ledger: Path, ids: list[str]) -> Iterator[WorkerStats]:
    """Workers one after another (a NAKed job is not deliverable when one checks for an
    empty queue) until each of ``ids`` ran to an end ("ok" or "ran"), at most 10."""
    for _ in range(10):
        yield _work(nats_url, queue)
        ended = {m for m, _, what in _lines(ledger) if what in ("ok", "ran")}
        if set(ids) <= ended:
            return


def test_a_keyed_retry_and_snooze_hold_the_line_and_the_snooze_spends_no_attempt(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    plan = {"plan": ["fail", "snooze", "snooze", "ok"], "s": 0.3}
    jobs = [Job("t.plan", plan, queue=queue, ordering_key="order:p"),
            Job("t.ok", {}, queue=queue, ordering_key="order:p")]  # fmt: skip
    first, second = _record(url, [("p0", jobs[0]), ("p1", jobs[1])])
    with support.relay(db, nats_url) as relay:
        relay.run()
    stats = list(_until(nats_url, queue, ledger, [first, second]))
    lines = _lines(ledger)
    assert [(a, w) for m, a, w in lines if m == first] == [
        ("1", "fail"), ("2", "snooze"), ("2", "snooze"), ("2", "ok")]  # fmt: skip
    assert [m for m, _, _ in lines] == [first] * 4 + [second]  # nothing of it ran between
    assert sum(s.snoozed for s in stats) == 2 and sum(s.dead for s in stats) == 0
    assert support.stream_count(nats_url, names.stream(queue)) == 0


def test_a_dead_lettered_keyed_job_releases_its_key(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    jobs = [Job("t.perm", {}, queue=queue, ordering_key="order:d"),
            Job("t.ok", {}, queue=queue, ordering_key="order:d")]  # fmt: skip
    dead, after = _record(url, [("d0", jobs[0]), ("d1", jobs[1])])
    with support.relay(db, nats_url) as relay:
        relay.run()
    list(_until(nats_url, queue, ledger, [after]))
    assert [m for m, _, w in _lines(ledger) if w == "ran"] == [dead, after]
    assert support.stream_count(nats_url, names.dead_stream(queue)) == 1
    assert support.stream_count(nats_url, names.stream(queue)) == 0
    with Broker(parse_url(nats_url)) as broker:  # re-driven: back in its key's partition
        assert admin.retry(broker, dead) == 1

    async def subjects(js: Any) -> list[str]:
        info = await js.stream_info(names.stream(queue))
        return [(await js.get_msg(names.stream(queue), seq)).subject
                for seq in range(info.state.first_seq, info.state.last_seq + 1)]

    part = names.partition(ordering_digest("order:d"))
    assert run(nats_url, subjects) == [names.ordered_subject(queue, part)]


def test_a_broker_worker_refuses_dead_letter_holds_key_in_one_line(nats_url: str) -> None:
    registry = Registry()

    @registry.job("t.held", dead_letter_holds_key=True)
    def held(payload: Any, ctx: Any) -> None:
        raise AssertionError("never runs")

    config = WorkerConfig(queues={"q": None})
    with pytest.raises(ConfigurationError) as err:
        JetStreamWorker(parse_url(nats_url), registry, config)
    message = str(err.value)
    assert "\n" not in message and "job t.held has dead_letter_holds_key=True" in message


def test_run_once_takes_one_job_of_a_key_per_round_in_order(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """A round asks each partition once: one job of a key, the next only in the next
    round (the one before it is acknowledged by then), beside every keyless job."""
    db, url = sqlite_db
    queue = support.queue_name()
    k = _record(url, [(f"k{i}", j) for i, j in enumerate(_keyed(queue, "order:r", 3))])
    plain = support.record_jobs(url, queue, 2)
    with support.relay(db, nats_url) as relay:
        relay.run()
    config = WorkerConfig(queues={queue: None}, sleep=0.2, lease=2.0, concurrency=4)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    with ThreadPoolExecutor(1) as pool:
        claimed = [pool.submit(worker.run_once).result() for _ in range(4)]
    assert claimed == [3, 1, 1, 0]
    ran = [m for m, _, what in _lines(ledger) if what == "ran"]
    assert [m for m in ran if m in k] == k and sorted(ran[:3]) == sorted([k[0], *plain])


def test_a_worker_started_before_the_ordered_subjects_runs_keyed_jobs_once_they_appear(
    sqlite_db: tuple[Database, str], nats_url: str, ledger: Path
) -> None:
    """The worker finds an old stream (no ordered subjects); the relay adds them and
    hands off keyed jobs: the running worker starts its ordered lane and runs them."""
    db, url = sqlite_db
    queue = support.queue_name()
    _old_stream(nats_url, queue)
    _dead_stream(nats_url, queue)  # require creates neither stream
    config = WorkerConfig(queues={queue: None}, sleep=0.1, lease=5.0, concurrency=2)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(worker.run)
        try:
            plain = support.record_jobs(url, queue, 1)
            with support.relay(db, nats_url) as relay:  # the keyless lane is up and running
                relay.run()
            wait_until(lambda: len(_lines(ledger)) == 1, 30, "the keyless job to run")
            z = _record(url, [(f"z{i}", j) for i, j in enumerate(_keyed(queue, "order:z", 2))])
            with support.relay(db, nats_url) as relay:  # create: adds the ordered subjects
                relay.run()
            wait_until(lambda: len(_lines(ledger)) == 3, 30, "the keyed jobs to run")
        finally:
            worker.stop()
        stats = running.result(timeout=30)
    assert [m for m, _, _ in _lines(ledger)] == plain + z
    assert stats.succeeded == 3 and stats.dead == 0


def test_an_ordered_consumer_letting_more_than_one_message_out_is_refused_in_one_line(
    nats_url: str,
) -> None:
    queue = support.queue_name()
    consumer = names.ordered_consumer(0)

    async def setup(js: Any) -> None:
        await provision.ensure(js, queue, provision.StreamSettings(), "create")
        await js.add_consumer(
            names.stream(queue),
            ConsumerConfig(
                durable_name=consumer,
                ack_policy=AckPolicy.EXPLICIT,
                max_ack_pending=5,
                max_waiting=7,  # not editable: the worker's settings cannot apply
                filter_subject=names.ordered_subject(queue, 0),
            ),
        )

    async def pending(js: Any) -> int:
        return int((await js.consumer_info(names.stream(queue), consumer)).config.max_ack_pending)

    run(nats_url, setup)
    config = WorkerConfig(queues={queue: None}, sleep=0.1, stop_when_empty=True)
    worker = JetStreamWorker(parse_url(nats_url), app.registry, config)
    with ThreadPoolExecutor(1) as pool, pytest.raises(BrokerError) as err:
        pool.submit(worker.run).result(timeout=30)
    message = str(err.value)
    assert "\n" not in message
    assert f"consumer {consumer} of stream {names.stream(queue)} has max_ack_pending=5" in message
    assert run(nats_url, pending) == 5  # left as it was



def test_a_key_used_in_two_queues_is_said_by_the_relay_in_one_warning(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    """On JetStream a key is kept per queue (each queue its own stream): the relay logs
    relay.ordering_key_queues (how many keys, which queues; never a key) for a batch that
    puts a key in another queue than the one it last went to, in the batch or before."""
    from structlog.testing import capture_logs

    db, url = sqlite_db
    q1, q2 = support.queue_name(), support.queue_name()
    _record(url, [("one0", _keyed(q1, "order:one", 1)[0]), ("solo", _keyed(q1, "order:s", 1)[0])])
    with support.relay(db, nats_url, batch_size=10) as relay, capture_logs() as logs:
        relay.run()  # each key in one queue so far: nothing to say
        assert not [e for e in logs if e["event"] == "relay.ordering_key_queues"]
        _record(url, [("one1", _keyed(q2, "order:one", 1)[0]),
                      ("two0", _keyed(q1, "order:two", 1)[0]),
                      ("two1", _keyed(q2, "order:two", 1)[0]),
                      ("solo1", _keyed(q1, "order:s", 1)[0])])
        assert relay.run().handed_off == 4
    (warned,) = [e for e in logs if e["event"] == "relay.ordering_key_queues"]
    assert warned["log_level"] == "warning"
    assert (warned["keys"], warned["queues"]) == (2, sorted([q1, q2]))
    assert "order:" not in str(warned) and str(ordering_digest("order:one")) not in str(warned)
