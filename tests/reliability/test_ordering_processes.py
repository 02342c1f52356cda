"""Ordering keys held by real processes racing on every backend: three worker
processes, two relay processes, 20 keys x 30 jobs recorded in interleaved transactions,
handlers failing at random and snoozing now and then, one worker SIGKILLed mid-run and
replaced. The check reads the start/end ledger the handlers write: per key, the starts
follow commit order and no two runs of a key overlap (a killed run ends when its
process died).

The same runs on JetStream (PostgreSQL and MariaDB, whose relays keep three batches in
flight): one relay process with ``--in-flight 3`` to the suite's own nats-server, three
``outbox worker --broker`` processes, the same keys, failures, snoozes and SIGKILLs."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outbox import Job, record
from outbox.db.connection import Connection
from outbox.jetstream import names
from tests.fixtures import databases as backends
from tests.fixtures.workers import ROOT, count, wait_until
from tests.nats import support
from tests.nats.servers import NatsServer
from tests.reliability import rows

TIMEOUT = 300
KEYS, PER_KEY = 20, 30


class Ledger:
    """Every line the handlers of every process wrote, with the writer's pid."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def lines(self) -> list[tuple[int, str, int, str, str, float]]:
        out = []
        for f in sorted(self.folder.glob("*.log")):
            pid = int(f.stem)
            for line in f.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) != 6:
                    continue  # a line cut short by SIGKILL
                key, seq, _mid, _attempt, what, at = parts
                out.append((pid, key, int(seq), what, _mid, float(at)))
        return out

    def done(self) -> int:
        """Jobs that ran to their end at least once (a SIGKILL between a job's end and
        its acknowledgement runs it again: at least once)."""
        return len({(key, seq) for _, key, seq, what, _, _ in self.lines() if what == "end"})


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    (tmp_path / "runs").mkdir()
    return Ledger(tmp_path / "runs")


@pytest.fixture
def spawn(db_url: str, ledger: Ledger) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "OUTBOX_TEST_RUNLOG": str(ledger.folder), "PYTHONPATH": str(ROOT)}

    def start(*args: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "outbox", "--database-url", db_url, "--log-format", "json"]
        log = ledger.folder.parent / f"proc{len(procs)}.stderr"
        with open(log, "wb") as err:
            p = subprocess.Popen([*cmd, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=err)  # fmt: skip
        p.stderr_path = log  # type: ignore[attr-defined]
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(TIMEOUT)


def _worker(spawn: Any, queue: str = "default", *extra: str) -> subprocess.Popen[bytes]:
    return spawn("worker", queue, "--app", "tests.fixtures.apps.ordering:registry",
                 "--concurrency", "4", "--lease", "2", "--sleep", "0.05", *extra)  # fmt: skip


def _produce(app_conn: Any, rng: random.Random, queue: str = "default") -> dict[str, list[int]]:
    """Every key's jobs, 1-5 of several keys per transaction, interleaved; the order of
    each key's seqs is its commit order (one producer commits one after the other)."""
    left = {f"order:{k}": list(range(PER_KEY)) for k in range(KEYS)}
    hang = {f"order:{k}": rng.randrange(5, PER_KEY) for k in range(0, KEYS, 4)}
    committed: dict[str, list[int]] = defaultdict(list)
    while left:
        batch = []
        for key in rng.sample(sorted(left), min(len(left), rng.randint(2, 6))):
            for _ in range(rng.randint(1, 3)):
                if left.get(key):
                    batch.append((key, left[key].pop(0)))
            if not left.get(key, True):
                del left[key]
        for key, seq in batch:
            payload = {"key": key, "seq": seq, "hang": hang.get(key) == seq}
            job = Job("o.step", payload, queue=queue, ordering_key=key)
            record(app_conn, f"{key}:{seq}", job)
        app_conn.commit()
        for key, seq in batch:
            committed[key].append(seq)
        time.sleep(rng.random() * 0.01)
    return committed


def _check(ledger: Ledger, committed: dict[str, list[int]], killed: dict[int, float]) -> None:
    runs: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    open_starts: dict[tuple[int, str], tuple[str, float, int]] = {}
    for pid, key, seq, what, mid, at in sorted(ledger.lines(), key=lambda line: line[5]):
        if what == "start":
            open_starts[(pid, mid)] = (key, at, seq)
        else:
            _, began, _ = open_starts.pop((pid, mid))
            runs[key].append((began, at, seq))
    for (pid, _), (key, began, seq) in open_starts.items():
        assert pid in killed, f"a run without an end in a process that was not killed ({pid})"
        runs[key].append((began, killed[pid], seq))
    assert sorted(runs) == sorted(committed)
    for key, spans in runs.items():
        spans.sort()
        starts = [seq for _, _, seq in spans]
        # in commit order: a seq starts again (retry, snooze, kill) until it ends, then the next
        assert [s for i, s in enumerate(starts) if i == 0 or starts[i - 1] != s] == committed[key]
        for (_, end, _), (nxt, _, _) in itertools.pairwise(spans):
            assert end <= nxt, f"two runs of {key} overlap"


@pytest.mark.slow
def test_three_workers_run_each_key_one_at_a_time_in_commit_order_through_a_sigkill(
    app_conn: Any, conn: Connection, spawn: Any, ledger: Ledger, tmp_path: Path
) -> None:
    rng = random.Random(27)
    workers = [_worker(spawn) for _ in range(3)]
    # two relays: their batches race, and one key's intents still enter in order
    relays = [spawn("relay", "--watch", "--poll-interval", "0.05", "--batch-size", "20")
              for _ in range(2)]  # fmt: skip
    committed = _produce(app_conn, rng)
    killed = _run_to_the_end(ledger, workers, lambda: _worker(spawn))
    _stop(workers, relays)
    _check(ledger, committed, killed)
    _report(conn.dialect.name, committed, killed, "2 relays, 3 workers (c4, lease 2 s)")
    assert count(conn, "outbox_jobs") == 0 and count(conn, "outbox_messages") == 0
    assert count(conn, "outbox_failed_jobs") == 0
    assert count(conn, "outbox_ordering_keys") == 0


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("backend", [b for b in backends.BACKENDS if b != "sqlite"])
def test_on_jetstream_three_workers_run_each_key_in_commit_order_with_three_batches_in_flight(
    app_conn: Any, conn: Connection, spawn: Any, ledger: Ledger, nats_server: NatsServer
) -> None:
    rng = random.Random(28)
    url, queue = nats_server.url, support.queue_name("ord")
    broker = ("--broker", url)
    relays = [spawn("relay", "--watch", "--poll-interval", "0.05", "--batch-size", "20",
                    "--target", url, "--in-flight", "3")]  # fmt: skip
    committed = _produce(app_conn, rng, queue)
    wait_until(lambda: support.stream_count(url, names.stream(queue)) >= 0, TIMEOUT, "the stream")
    workers = [_worker(spawn, queue, *broker) for _ in range(3)]
    killed = _run_to_the_end(ledger, workers, lambda: _worker(spawn, queue, *broker))
    _stop(workers, relays)
    _check(ledger, committed, killed)
    _report(
        f"{conn.dialect.name} → JetStream",
        committed,
        killed,
        "1 relay `--target nats:// --in-flight 3`, 3 workers `--broker` (c4, lease 2 s)",
    )
    assert count(conn, "outbox_messages") == 0
    assert support.stream_count(url, names.stream(queue)) == 0
    assert support.stream_count(url, names.dead_stream(queue)) == 0


def _report(
    backend: str, committed: dict[str, list[int]], killed: dict[int, float], crew: str
) -> None:
    """The run's row of the reliability report; ``_check`` has found no key out of order
    and no run overlapping another of its key."""
    rows.report(
        rows.Row(
            fault=f"SIGKILL workers, ordered jobs ({len(killed)}x)",
            backend=backend,
            traffic=f"{KEYS} keys x {PER_KEY} jobs, 1 producer; {crew}",
            jobs=sum(len(seqs) for seqs in committed.values()),
            faults=len(killed),
            lost=0,
            double_handoffs=None,
            extra_executions=None,
            extra_bound=None,
            figures={"order violations": 0, "overlapping runs of a key": 0},
        )
    )


def _run_to_the_end(
    ledger: Ledger, workers: list[subprocess.Popen[bytes]], new: Any
) -> dict[int, float]:
    """Every job run to its end: one worker SIGKILLed a third of the way in, and each that
    holds a hanging job; each replaced. When each was killed, by pid."""
    total = KEYS * PER_KEY
    wait_until(lambda: ledger.done() >= total // 3, TIMEOUT, "a third of the jobs to end")
    victim = workers.pop(0)  # SIGKILLed mid-run, whatever it holds
    victim.send_signal(signal.SIGKILL)
    victim.wait(TIMEOUT)
    killed = {victim.pid: time.time()}
    workers.append(new())
    # A hanging job (its first attempt sleeps 60 s) is ended by SIGKILLing its worker.
    while ledger.done() < total:
        for w in list(workers):
            if _holds_a_hang(ledger, w.pid, killed):
                w.send_signal(signal.SIGKILL)
                w.wait(TIMEOUT)
                killed[w.pid] = time.time()
                workers.remove(w)
                workers.append(new())
        time.sleep(0.5)
        assert time.time() - min(killed.values()) < TIMEOUT, "the run did not finish"
    assert len(killed) >= 2  # the one killed mid-run, and those that held a hanging job
    return killed


def _stop(workers: list[subprocess.Popen[bytes]], relays: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:  # a SIGTERM before its handlers are set would kill it outright
        wait_until(lambda w=w: '"worker.started"' in w.stderr_path.read_text(encoding="utf-8"),
                   TIMEOUT, "a replacement worker to start")  # fmt: skip
    for p in [*workers, *relays]:
        p.send_signal(signal.SIGTERM)
    assert [p.wait(TIMEOUT) for p in [*workers, *relays]] == [0] * (len(workers) + len(relays))


def _holds_a_hang(ledger: Ledger, pid: int | None, killed: dict[int, float]) -> bool:
    """Has ``pid`` started a hanging first attempt more than a second ago, not ended?"""
    if pid is None or pid in killed:
        return False
    started: dict[str, float] = {}
    for p, _key, _seq, what, mid, at in ledger.lines():
        if p != pid:
            continue
        if what == "start":
            started[mid] = at
        else:
            started.pop(mid, None)
    return any(time.time() - at > 1.0 for at in started.values())
