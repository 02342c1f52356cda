"""Redis workers SIGKILLed while jobs run, as real ``outbox worker --broker redis://``
processes: nothing is lost (``XAUTOCLAIM`` takes a dead worker's entries back after the
lease), extra executions stay within what the kills explain; with transactional handlers
and the inbox, killed between COMMIT and ack, every business row exists once."""

from __future__ import annotations

import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue.redis import names
from tests.fixtures.databases import backend_of, sqlite_url
from tests.fixtures.fault_harness import (
    INBOX_KILL_P,
    cli_argv,
    fetch,
    finish,
    install_ledger,
    keep_running,
    spawn,
)
from tests.redis import entries
from tests.redis.test_worker_redis import runs
from tests.reliability import rows
from tests.reliability.conftest import SOAK_SIZED

rq, ledger = entries.rq, entries.ledger  # the fixtures, used by name
CONCURRENCY, PREFETCH = 2, 2
JOBS, KILLS = (400, 30) if SOAK_SIZED else (40, 6)
INBOX_WITHIN = 300 + JOBS  # the inbox test's liveness bound, on a loaded machine (s)




def _worker(db_url: str, queue: str, ledger: Path) -> Any:
    argv = cli_argv(
        db_url, "worker", queue, "--app", "tests.nats.app:registry", "--broker", entries.URL,
        "--lease", "1", "--sleep", "0.1", "--concurrency", str(CONCURRENCY),
        "--prefetch", str(PREFETCH),
    )
    return spawn(argv, {"NATS_TEST_LEDGER": str(ledger)})


@pytest.mark.slow
def test_workers_sigkilled_while_jobs_run_lose_nothing(
    rq: Any, ledger: Path, tmp_path: Path
) -> None:
    r, queue = rq
    db_url = sqlite_url(tmp_path)
    ids = [entries.add_job(r, queue, "t.slow", {"s": 0.15}) for _ in range(JOBS)]
    rng, kills = random.Random(7), 0
    procs = [_worker(db_url, queue, ledger) for _ in range(2)]
    began = time.monotonic()
    deadline = began + 90 + JOBS * 0.2
    try:
        while len(runs(ledger)) < len(ids):
            assert time.monotonic() < deadline, f"{len(ids) - len(runs(ledger))} never ran"
            time.sleep(rng.uniform(0.3, 0.8))
            if kills < KILLS:
                i = rng.randrange(len(procs))
                procs[i].send_signal(signal.SIGKILL)
                finish(procs[i], 10)
                kills += 1
                procs[i] = _worker(db_url, queue, ledger)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            code, _, err = finish(proc, 30)
            assert code in (0, -15), err[-2000:]
    done = runs(ledger)
    assert set(done) == set(ids)  # 0 lost
    extra = sum(done.values()) - len(ids)
    assert extra <= kills * (CONCURRENCY + PREFETCH)  # each kill re-runs what it held
    assert entries.left(r, queue) == 0
    assert r.xpending(names.stream(queue), names.GROUP)["pending"] == 0
    rows.report(
        rows.Row(
            fault=f"SIGKILL broker workers (Redis) while jobs run ({kills}x)",
            backend=f"Redis {r.info('server')['redis_version']}",
            traffic=f"{len(ids)} jobs of 0.15 s; 2 workers `--broker redis://` (c{CONCURRENCY}, "
            f"p{PREFETCH}, lease 1 s)",
            jobs=len(ids), faults=kills, lost=0, double_handoffs=None,
            extra_executions=extra, extra_bound=kills * (CONCURRENCY + PREFETCH),
            minutes=round((time.monotonic() - began) / 60, 1),
        )
    )


@pytest.mark.slow
@pytest.mark.timeout(INBOX_WITHIN + 60)  # soak-sized (300 jobs) it outlived pytest's 300 s
def test_inbox_workers_killed_between_commit_and_ack_leave_each_business_row_once(
    rq: Any, tmp_path: Path
) -> None:
    r, queue = rq
    db_url = sqlite_url(tmp_path)
    with Database(db_url).connect() as c:
        migrate(c)
    install_ledger(db_url)
    ids = [entries.add_job(r, queue, "harness.tx", {"i": i}) for i in range(JOBS * 3 // 4)]
    began = time.monotonic()
    argv = [sys.executable, "-m", "tests.redis.inbox_worker", entries.URL, db_url, queue]
    kills = keep_running(
        lambda seed: spawn([*argv, str(seed), INBOX_KILL_P], {"HARNESS_URL": db_url}),
        lambda: entries.left(r, queue),
        lease=1.1,  # the workers' lease: what a killed one held is taken back after it
        within=INBOX_WITHIN,
    )
    assert kills >= 3, f"only {kills} kills: the test did not test"
    ledger = Counter(row[0] for row in fetch(db_url, "SELECT message_id FROM harness_ledger"))
    assert ledger == Counter({i: 1 for i in ids})
    rows.report(
        rows.Row(
            fault=f"SIGKILL broker workers (Redis) between COMMIT and ack, inbox ({kills}x)",
            backend=backend_of(db_url),
            traffic=f"{len(ids)} transactional jobs on Redis; 2 workers `--broker` at a time",
            jobs=len(ids), faults=kills, lost=0, double_handoffs=None,
            extra_executions=None, extra_bound=None,
            doubled_effects=0,  # each business row once: asserted above
            minutes=round((time.monotonic() - began) / 60, 1),
        )
    )
