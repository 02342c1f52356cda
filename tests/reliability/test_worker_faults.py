"""Workers SIGKILLed at random while traffic flows, restarted like a supervisor would:
every committed job runs, none twice unless a kill explains it, nothing is left held."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from outbox.queue import push
from tests.fixtures.databases import raw_connect
from tests.fixtures.fault_harness import (
    WORKER_READY,
    check_delivery,
    fetch,
    finish,
    harness_job,
    kill_at_random_until_produced,
    pending_count,
    placeholder,
    relay_argv,
    spawn,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.supervisor import Supervisor

CONCURRENCY, PREFETCH = 2, 2


def _queue_empty(url: str) -> bool:
    return pending_count(url) == 0 and not fetch(url, "SELECT count(*) FROM outbox_jobs")[0][0]


@pytest.mark.slow
@pytest.mark.parametrize("job", ["harness.exec", "harness.tx"])
def test_workers_and_relays_killed_at_random_lose_nothing(
    ledger_url: str, tmp_path: Path, job: str
) -> None:
    rng = random.Random(66)
    env = {"HARNESS_URL": ledger_url, "HARNESS_JOB": job}
    crew = Supervisor(tmp_path)
    for i in range(2):
        crew.add(
            f"relay{i}",
            relay_argv(ledger_url, batch_size=10, poll_interval=0.05),
            ready="relay.watch",
        )
    for i in range(3):
        crew.add(
            f"worker{i}",
            worker_argv(ledger_url, concurrency=CONCURRENCY, lease=1.0),
            ready=WORKER_READY,
            env=env,
        )
    producers = spawn_producers(ledger_url, 2, 80, pause=0.01, env=env)
    try:
        kill_at_random_until_produced(crew, producers, rng)
        wait_until(lambda: _queue_empty(ledger_url), 180, "the crew to drain the queue")
    finally:
        crew.wait_ready()
        results = crew.stop()

    for name, (code, out) in results.items():
        assert code == 0, (name, out[-3000:])
    worker_kills = sum(m.kills for n, m in crew.members.items() if n.startswith("worker"))
    allowed = 0 if job == "harness.tx" else worker_kills * (CONCURRENCY + PREFETCH)
    verdict = check_delivery(ledger_url, extra_allowed=allowed)
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 160


def test_corrupted_queue_rows_never_crash_a_worker(ledger_url: str) -> None:
    env = {"HARNESS_URL": ledger_url}
    app = raw_connect(ledger_url)
    good = [push(app, harness_job(f"good:{i}", i)) for i in range(3)]
    bad_json = push(app, harness_job("bad_json", 9))
    unknown = push(app, harness_job("unknown", 10))
    app.commit()
    ph = placeholder(ledger_url)
    cur = app.cursor()
    cur.execute(
        f"UPDATE outbox_jobs SET payload = '{{\"k\": tru' WHERE message_id = {ph}", (bad_json,)
    )
    cur.execute(
        f"UPDATE outbox_jobs SET job_name = 'no.such.job' WHERE message_id = {ph}", (unknown,)
    )
    app.commit()
    app.close()

    code, _, err = finish(spawn(worker_argv(ledger_url, "--stop-when-empty"), env), 120)
    assert code == 0, err[-3000:]

    ran = sorted(r[0] for r in fetch(ledger_url, "SELECT message_id FROM harness_ledger"))
    assert ran == sorted(good)
    dead = fetch(ledger_url, "SELECT message_id FROM outbox_failed_jobs")
    assert dead == [(bad_json,)]
    left = fetch(ledger_url, "SELECT message_id, reserved_by FROM outbox_jobs")
    assert left == [(unknown, None)]
