"""latency: commit → handler start with an idle relay + worker, and under background load.

The producer commits one probe every interval: a direct ``push`` (commit → worker), or
a ``record()`` (commit → relay → worker), alternately. Percentiles per round; the
relay is the CLI a user runs (``outbox relay --watch``), the worker a ``Worker`` in its
own process; both wake on LISTEN/NOTIFY.

One more case pushes probes while the server terminates every session of the worker
(``pg_terminate_backend``: its queue connection and its LISTEN one) twice a second, as a
failover or an operator would; the worker tells its sessions apart by its
``application_name``. A probe that never starts within ``PROBE_TIMEOUT_S`` counts with
that wait (a floor), so one unlucky kill shows in the p99 instead of ending the run.
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import servers
from bench.core import Case, Target
from bench.data import QUEUE, connect
from bench.plan import Ctx, Plan
from bench.procs import ROOT
from bench.w_latency import PROBE
from bench.w_outbox import missing

NAME = "latency"
_seq = itertools.count(1)
LOAD_PER_S = 1_000
KILLS_PER_S = 2
WORKER_APP_NAME = "bench-latency-worker"
PROBE_TIMEOUT_S = 10.0


class Terminator:
    """While on, ends every session of the rig's worker ``KILLS_PER_S`` times a second."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.kills = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        conn = connect(self.url, migrate=False)
        try:
            while not self._stop.wait(1 / KILLS_PER_S):
                rows = conn.execute_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %(app)s AND datname = current_database()",
                    {"app": WORKER_APP_NAME},
                )
                self.kills += len(rows)
        finally:
            conn.close()

    def __enter__(self) -> Terminator:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


class Rig:
    """The long-running relay and worker (and, when asked, the load generator)."""

    def __init__(self, url: str, sink: Path) -> None:
        self.url, self.sink = url, sink
        self.procs: list[subprocess.Popen[bytes]] = []
        self.load: subprocess.Popen[bytes] | None = None
        self.offset = 0
        self.seen: dict[int, float] = {}

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_LATENCY_FILE=str(self.sink))
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        if self.procs:
            return
        cli = ["-m", "outbox", "--database-url", self.url, "--log-level", "warning"]
        self.procs.append(self._spawn(*cli, "relay", "--watch"))
        # The worker through its Python API (the `outbox worker` CLI runs the same loop).
        sep = "&" if "?" in self.url else "?"
        worker_url = f"{self.url}{sep}application_name={WORKER_APP_NAME}"
        self.procs.append(
            self._spawn("-m", "bench.w_outbox", worker_url, "bench.w_latency:APP", "8", "10", "0")
        )
        self.probe("push", warmup=True)

    def vacuum(self) -> None:
        """What autovacuum would have done by now (it is off on this machine's server).

        The rig lives through every round; without this, the rows that earlier samples
        pushed and deleted pile up in the claim and relay indexes, and each round reads
        slower than the last."""
        conn = connect(self.url, migrate=False)
        try:
            conn.execute_sql("VACUUM outbox_jobs")
            conn.execute_sql("VACUUM outbox_messages")
        finally:
            conn.close()

    def set_load(self, on: bool) -> None:
        if on and self.load is None:
            self.load = self._spawn("-m", "bench.w_latency", self.url, str(LOAD_PER_S))
            time.sleep(1.0)
        elif not on and self.load is not None:
            self.load.terminate()
            self.load.wait()
            self.load = None

    def probe(self, kind: str, warmup: bool = False, floor: bool = False) -> float:
        """Commit one probe; return commit → handler start in ms. With ``floor``, a probe
        that never starts counts with the time it was waited for."""
        from bench.w_record import app_connect
        from outbox import Job, record
        from outbox.queue import push

        if not hasattr(self, "conn"):
            self.conn, _ = app_connect(self.url)
        seq = next(_seq)
        job = Job(PROBE, {"seq": seq, "pad": "x" * 150}, queue=QUEUE)
        if kind == "push":
            push(self.conn, job)
        else:
            record(self.conn, f"latency:{seq}:{time.time_ns()}", job)
        self.conn.commit()
        committed = time.monotonic()
        try:
            return (self._started(seq, 30.0 if warmup else PROBE_TIMEOUT_S) - committed) * 1000
        except TimeoutError:
            if not floor:
                raise
            return (time.monotonic() - committed) * 1000

    def _started(self, seq: int, timeout: float) -> float:
        """The handler's start instant, read from its sink (the poll's delay is not counted)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sink.exists():
                with self.sink.open() as f:
                    f.seek(self.offset)
                    text = f.read()
                done, _, _ = text.rpartition("\n")
                self.offset += len(done) + 1 if done else 0
                for line in done.splitlines():
                    s, t = line.split()
                    self.seen[int(s)] = float(t)
            if seq in self.seen:
                return self.seen.pop(seq)
            time.sleep(0.002)
        raise TimeoutError(f"probe {seq} never started")

    def stop(self) -> None:
        self.set_load(False)
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()


def _case(rig: Rig, kind: str, loaded: bool, samples: int, gap_s: float) -> Case:
    path = "push → handler" if kind == "push" else "record() → relay → handler"
    label = f"{'loaded' if loaded else 'idle'}: {path}"

    def measure() -> dict[str, float]:
        rig.start()
        rig.vacuum()
        rig.set_load(loaded)
        out = []
        for _ in range(samples):
            out.append(rig.probe(kind))
            time.sleep(gap_s)
        rig.set_load(False)
        q = statistics.quantiles(out, n=100, method="inclusive")
        return {"p50": q[49], "p90": q[89], "p99": q[98]}

    return Case(label, measure, unit="ms", higher_is_better=False, pending=missing("worker"))


TERMINATED = f"terminated {KILLS_PER_S}x/s: push → handler"


def _terminated_case(rig: Rig, samples: int, gap_s: float) -> Case:
    """Probes pushed while the server ends the worker's sessions twice a second."""

    def measure() -> dict[str, float]:
        rig.start()
        rig.vacuum()
        out = []
        with Terminator(rig.url) as kills:
            for _ in range(samples):
                out.append(rig.probe("push", floor=True))
                time.sleep(gap_s)
        q = statistics.quantiles(out, n=100, method="inclusive")
        return {"p50": q[49], "p99": q[98], "sessions ended": float(kills.kills)}

    return Case(
        TERMINATED,
        measure,
        unit="ms",
        higher_is_better=False,
        pending=missing("worker"),
        metrics={"sessions ended": ("sessions", True)},
    )


def plan(ctx: Ctx) -> Plan:
    url = servers.fresh("postgresql", "outbox_bench_latency")
    connect(url).close()
    sink = servers.WORK / "latency.log"
    sink.unlink(missing_ok=True)
    rig = Rig(url, sink)
    samples, gap = (200, 0.1) if not ctx.quick else (30, 0.05)
    p = Plan(after=[rig.stop])
    for loaded in (False, True):
        for kind in ("push", "record"):
            p.cases.append(_case(rig, kind, loaded, samples, gap))
    p.cases.append(_terminated_case(rig, max(samples, 100), gap))  # >= 10 rounds of kills
    p.targets = [
        Target(
            f"worker's enqueue → start p99 while the server terminates its connection "
            f"{KILLS_PER_S}x a second <= 100 ms",
            f"{NAME}: {TERMINATED} p99",
            None,
            "<=",
            100.0,
        ),
        Target(
            "idle push → handler start p50 <= 3 ms",
            f"{NAME}: idle: push → handler p50",
            None,
            "<=",
            3.0,
        ),
        Target(
            "idle record() → relay → handler p50 <= 5 ms",
            f"{NAME}: idle: record() → relay → handler p50",
            None,
            "<=",
            5.0,
        ),
        Target(
            "idle record() → relay → handler p99 <= 15 ms",
            f"{NAME}: idle: record() → relay → handler p99",
            None,
            "<=",
            15.0,
        ),
    ]
    p.notes.append(
        f"latency: {samples} probes per case per round, one every "
        f"{gap * 1000:.0f} ms; load = {LOAD_PER_S:,} pushed jobs/s; terminated = "
        f"pg_terminate_backend on every session of the worker {KILLS_PER_S}x a second"
    )
    return p
