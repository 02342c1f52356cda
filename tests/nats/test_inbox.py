"""The inbox of the JetStream worker (``outbox.queue.broker.inbox``) against a real
nats-server and each database: transactional handlers committing their effects once,
worker processes SIGKILLed between COMMIT and ack, a redelivered id acknowledged
without running, a failed attempt leaving no id, retention and ``outbox prune``.

Truth is the ledger of business rows (``harness_ledger``, written by ``harness.tx`` in
the job's own transaction, ``tests/reliability/ledger_app.py``)."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from outbox.db.connection import Database
from outbox.errors import ConfigurationError
from outbox.jetstream import codec, names
from outbox.jetstream.connect import parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.queue.broker import inbox
from outbox.queue.config import WorkerConfig
from outbox.relay import admin
from tests.fixtures.databases import backend_of, placeholder, raw_connect
from tests.fixtures.fault_harness import (
    INBOX_KILL_P,
    cli_argv,
    fetch,
    finish,
    keep_running,
    spawn,
)
from tests.nats import support
from tests.nats.servers import run
from tests.reliability import rows
from tests.reliability.ledger_app import registry

BACKENDS = ["sqlite", "postgresql", "mysql"]
SOAK = os.environ.get("OUTBOX_SOAK", "") not in ("", "0")
# The kill test's processes on SQLite and PostgreSQL (MariaDB too with OUTBOX_SOAK=1):
# what a kill between COMMIT and ack tests (the redelivery after the ack wait, the id
# found, the ack without a run) is the JetStream worker's, not the dialect's, and each
# backend's inbox SQL (the id written in the handler's transaction, read back on a
# redelivery) runs in test_a_copy_of_a_committed_job_is_acked_without_running on all
# three. SQLite stays for its single writer under two processes.
KILL_BACKENDS = BACKENDS if SOAK else ["sqlite", "postgresql"]


@pytest.fixture
def harness(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HARNESS_URL", ledger_url)
    return ledger_url


def _handed_off(url: str, nats_url: str, queue: str, n: int, payload: Any = None) -> list[str]:
    ids = support.record_jobs(url, queue, n, job="harness.tx", payload=payload)
    with support.relay(Database(url), nats_url) as relay:
        relay.run()
    return ids


def _work(url: str, nats_url: str, queue: str, **kw: Any) -> JetStreamWorker:
    settings: dict[str, Any] = {"sleep": 0.2, "lease": 2.0, "stop_when_empty": True, **kw}
    worker = JetStreamWorker(
        parse_url(nats_url),
        registry,
        WorkerConfig(queues={queue: None}, **settings),
        database=Database(url),
    )
    with ThreadPoolExecutor(1) as pool:
        pool.submit(worker.run).result()
    return worker


def _ledger(url: str) -> Counter[str]:
    return Counter(r[0] for r in fetch(url, "SELECT message_id FROM harness_ledger"))


def _inbox(url: str) -> set[str]:
    return {r[0] for r in fetch(url, "SELECT message_id FROM outbox_inbox")}


@pytest.mark.slow
@pytest.mark.parametrize("backend", KILL_BACKENDS, indirect=True)
def test_workers_killed_between_commit_and_ack_leave_each_business_row_once(
    harness: str, nats_url: str
) -> None:
    """Two worker processes at a time, each SIGKILLing itself after an ack with
    probability ``INBOX_KILL_P``, just after its commit: the redeliveries find their ids
    and do not run.
    SQLite and PostgreSQL; MariaDB too with ``OUTBOX_SOAK=1`` (``KILL_BACKENDS``)."""
    queue = support.queue_name("inbox")
    ids = _handed_off(harness, nats_url, queue, 30)
    stream = names.stream(queue)
    argv = [sys.executable, "-m", "tests.nats.inbox_worker", nats_url, harness, queue]
    kills = keep_running(
        lambda seed: spawn([*argv, str(seed), INBOX_KILL_P], {"HARNESS_URL": harness}),
        lambda: support.stream_count(nats_url, stream),
        lease=1.1,  # the workers' lease (tests/nats/inbox_worker.py)
        within=240,
    )
    assert kills >= 3, f"only {kills} kills: the test did not test"
    assert _ledger(harness) == Counter({i: 1 for i in ids})
    assert _inbox(harness) == set(ids)
    rows.report(
        rows.Row(
            fault=f"SIGKILL broker workers between COMMIT and ack, inbox ({kills}x)",
            backend=backend_of(harness),
            traffic=f"{len(ids)} transactional jobs on JetStream; 2 workers `--broker` at a time",
            jobs=len(ids),
            faults=kills,
            lost=0,
            double_handoffs=None,
            extra_executions=None,
            extra_bound=None,
            doubled_effects=0,  # each business row once: asserted above
        )
    )


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_copy_of_a_committed_job_is_acked_without_running(harness: str, nats_url: str) -> None:
    """The same outbox message under a new Nats-Msg-Id (a relay re-publishing past the
    duplicate window): JetStream keeps both, the inbox runs one."""
    queue = support.queue_name("dup")
    [message_id] = _handed_off(harness, nats_url, queue, 1)

    async def copy(js: Any) -> None:
        stream = names.stream(queue)
        info = await js.stream_info(stream)
        original = await js.get_msg(stream, info.state.first_seq)
        headers = {**(original.headers or {}), codec.MSG_ID: f"{message_id}:copy"}
        await js.publish(names.subject(queue), original.data, headers=headers)

    run(nats_url, copy)
    assert support.stream_count(nats_url, names.stream(queue)) == 2
    worker = _work(harness, nats_url, queue)
    assert worker.stats.succeeded == 2 and worker.inbox is not None
    assert worker.inbox.duplicates == 1
    assert _ledger(harness) == Counter({message_id: 1})
    assert support.stream_count(nats_url, names.stream(queue)) == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_failed_attempt_leaves_no_id_and_no_business_row(harness: str, nats_url: str) -> None:
    queue = support.queue_name("fail")
    [message_id] = _handed_off(harness, nats_url, queue, 1, payload={"fail": "no"})
    worker = _work(harness, nats_url, queue, max_jobs=1)
    assert worker.stats.retried == 1 and worker.stats.succeeded == 0
    assert _inbox(harness) == set() and _ledger(harness) == Counter()
    assert message_id not in _inbox(harness)


def test_transactional_handlers_without_a_database_are_refused(nats_url: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        JetStreamWorker(parse_url(nats_url), registry, WorkerConfig())
    assert "harness.tx is transactional" in str(err.value) and "--database-url" in str(err.value)


def test_a_window_plus_lease_longer_than_the_retention_is_refused() -> None:
    inbox.check_retention("OUTBOX_q", 120.0, 30.0)  # the defaults are well inside
    with pytest.raises(ConfigurationError) as err:
        inbox.check_retention("OUTBOX_q", inbox.RETENTION_S, 30.0)
    assert "stream OUTBOX_q" in str(err.value) and "inbox keeps an id" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_prune_deletes_ids_past_the_retention_and_keeps_younger_ones(
    database: Database, db_url: str
) -> None:
    day, now = inbox.DAY_MS, int(time.time() * 1000)
    raw = raw_connect(db_url)
    try:
        ph = placeholder(db_url)
        sql = f"INSERT INTO outbox_inbox (message_id, queue, handled_at) VALUES ({ph}, 'q', {ph})"
        for mid, age in (("old", 3 * day), ("day-old", day + 60_000), ("new", 60_000)):
            raw.cursor().execute(sql, (mid, now - age))
        raw.commit()
    finally:
        raw.close()
    with database.connect() as c:
        admin.prune(c, days=0)  # 0 days still keeps the inbox's day
    assert _inbox(db_url) == {"new"}
    with database.connect() as c:
        admin.prune(c, days=30)
    assert _inbox(db_url) == {"new"}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_cli_worker_runs_transactional_handlers_with_the_inbox(
    harness: str, nats_url: str
) -> None:
    queue = support.queue_name("cli")
    ids = _handed_off(harness, nats_url, queue, 3)
    argv = cli_argv(
        harness, "worker", queue, "--app", "tests.reliability.ledger_app:registry",
        "--broker", nats_url, "--stop-when-empty",
    )
    code, _, err = finish(spawn(argv, {"HARNESS_URL": harness}), 120)
    assert code == 0, err[-2000:]
    assert _ledger(harness) == Counter({i: 1 for i in ids}) and _inbox(harness) == set(ids)
    assert "secret" not in err and os.environ.get("PGPASSWORD", "x") not in err


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_committed_last_attempt_redelivered_is_acked_not_dead_lettered(
    harness: str, nats_url: str
) -> None:
    """``max_attempts=1``: the worker dies after the commit; the redelivery is attempt 2,
    past the limit, and the inbox says the first one committed."""
    queue = support.queue_name("last")
    ids = support.record_jobs(harness, queue, 1, job="t.tx.once")
    with support.relay(Database(harness), nats_url) as relay:
        relay.run()
    argv = [sys.executable, "-m", "tests.nats.inbox_worker", nats_url, harness, queue]
    env = {"HARNESS_URL": harness}
    code, _, err = finish(spawn([*argv, "1", "1.0", "tests.nats.app:once"], env), 60)
    assert code == -9, err[-2000:]  # killed between its commit and its ack
    assert _ledger(harness) == Counter({ids[0]: 1})
    deadline = time.monotonic() + 60
    while support.stream_count(nats_url, names.stream(queue)) > 0:  # after the ack wait
        assert time.monotonic() < deadline, "the redelivery never came"
        code, _, err = finish(spawn([*argv, "2", "0", "tests.nats.app:once"], env), 60)
        assert code == 0, err[-2000:]
    assert _ledger(harness) == Counter({ids[0]: 1})
    assert support.stream_count(nats_url, names.dead_stream(queue)) in (-1, 0)
