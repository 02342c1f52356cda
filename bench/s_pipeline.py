"""pipeline: the whole path under load, producers → relay → worker, beside pgqueuer.

Ours: 8 producer processes each commit a business row + ``record()`` per transaction
for the sample's duration, while one ``outbox relay --watch`` and one ``outbox worker``
(CLI defaults, default log level) run. pgqueuer: the same 8 producers with a business
row + ``enqueue`` of one job per transaction, and one consumer with its defaults.
Producers run flat out; the figure is the jobs the consumer started inside the
producers' window per second (``committed/s`` beside it shows whether it kept up), and
commit → handler start over every job committed in the window (see bench.w_pipeline).
Ours also splits that p99 into the relay's leg (commit → handoff) and the worker's
(handoff → handler start), to say where a miss comes from. The handoff's time is the
job's ``enqueued_at``: the relay statement's clock, read as that statement begins, so
the "worker leg" also holds the rest of the relay's statement and its commit (11-20 ms
at the median under this load, measured with a trace of the relay's batches; see
docs/incoming/tail.md), not the worker's time alone.

An optional case compares ours with an earlier version in the same interleaved run:
``BENCH_PIPELINE_BASELINE=DIR`` runs the relay and worker from another checkout (e.g. a
snapshot of an earlier commit, ``git archive COMMIT | tar -x -C DIR``); the producers
stay this tree's (the handler: the checkout's own bench.w_pipeline).

Each sample starts from empty tables and fresh consumer processes, waits until a probe
job has gone through (so start-up is not timed), runs the producers for a fixed time,
gives the consumers up to DRAIN_S to catch up, then stops them with SIGTERM (SIGKILL
after STOP_S). Consumers also get SIGTERM if this process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import servers, w_pgqueuer, w_record
from bench.core import Case, Target
from bench.data import JOB_NAME, QUEUE, connect
from bench.plan import Ctx, Plan
from bench.procs import ROOT, Spec, run
from bench.w_outbox import missing

NAME = "pipeline"
PRODUCERS = 8
DRAIN_S = 30.0
STOP_S = 20.0
READY_S = 60.0
OURS = "outbox: 8 producers record() + relay --watch + 1 worker (CLI defaults)"
THEIRS = "pgqueuer: 8 producers enqueue singly + 1 consumer (defaults)"
METRICS = {"jobs/s": ("jobs/s", True), "committed/s": ("txn/s", True)}


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(args: list[str], log: Path, out: Path, root: Path = ROOT) -> subprocess.Popen[bytes]:
    """A consumer process running ``root``'s code."""
    path = str(root) if root == ROOT else f"{root}{os.pathsep}{ROOT}"
    env = dict(os.environ, PYTHONPATH=path, BENCH_PIPELINE_LOG=str(log))
    with out.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=root,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class System:
    """One side of the comparison: how to prepare, start, probe and read its backlog."""

    def __init__(self, kind: str, url: str, *, root: Path = ROOT, tag: str = "") -> None:
        self.kind, self.url, self.root = kind, url, root
        self.work = servers.WORK / f"pipeline-{kind}{tag}"
        servers.WORK.mkdir(parents=True, exist_ok=True)  # a fresh clone has none yet

    def prepare(self) -> None:
        if self.kind == "outbox":
            w_record.prepare(self.url)  # empty outbox tables, a fresh business table
            return
        w_pgqueuer.prepare(self.url, 0)
        conn = connect(self.url, migrate=False)
        conn.execute_sql("DROP TABLE IF EXISTS bench_business")
        conn.execute_sql(
            "CREATE TABLE bench_business (id bigserial PRIMARY KEY, note_id BIGINT NOT NULL, "
            "title VARCHAR(200) NOT NULL, updated_at BIGINT NOT NULL)"
        )
        conn.close()

    def start(self, log: Path) -> list[subprocess.Popen[bytes]]:
        out = self.work.with_suffix(".out")  # the consumers' own output, this sample's
        out.unlink(missing_ok=True)
        if self.kind == "pgqueuer":
            return [_spawn(["-m", "bench.w_pipeline", "pgqueuer", self.url], log, out)]
        cli = ["-m", "outbox", "--database-url", self.url]
        return [
            _spawn([*cli, "relay", "--watch"], log, out, self.root),
            _spawn([*cli, "worker", QUEUE, "--app", "bench.w_pipeline:APP"], log, out, self.root),
        ]

    def probe(self) -> None:
        """One job through the running consumers, the same way producers send theirs."""
        if self.kind == "outbox":
            from outbox import Job, record

            conn, _ = w_record.app_connect(self.url)
            record(conn, "pipeline:probe", Job(JOB_NAME, {"seq": "probe"}, queue=QUEUE))
            conn.commit()
            conn.close()
            return

        async def enqueue() -> None:
            import asyncpg
            import orjson
            from pgqueuer import AsyncpgDriver, Queries

            c = await asyncpg.connect(self.url)
            await Queries(AsyncpgDriver(c)).enqueue(JOB_NAME, orjson.dumps({"seq": "probe"}))
            await c.close()

        asyncio.run(enqueue())

    def waiting(self) -> int:
        """Jobs not yet taken by the consumer (intents not relayed count too)."""
        if self.kind == "outbox":
            sql = (
                "SELECT (SELECT count(*) FROM outbox_messages) + "
                "(SELECT count(*) FROM outbox_jobs WHERE reserved_by IS NULL)"
            )
        else:
            sql = "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"
        conn = connect(self.url, migrate=False)
        try:
            return int(conn.execute_sql(sql)[0][0])
        finally:
            conn.close()

    def until_empty(self, timeout: float, procs: list[subprocess.Popen[bytes]]) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a {self.kind} consumer exited early; see {self.work}.out")
            if self.waiting() == 0:
                return True
            time.sleep(0.05)
        return False

    def producers(self, seconds: float) -> list[Spec]:
        target = "producer" if self.kind == "outbox" else "pgqueuer_producer"
        return [
            Spec(
                f"bench.w_pipeline:{target}",
                {"url": self.url, "k": k, "seconds": seconds, "log": f"{self.work}-p{k}.log"},
            )
            for k in range(PRODUCERS)
        ]


def _read(path: Path) -> dict[str, list[float]]:
    """``seq`` → the times noted on its line."""
    out = {}
    for line in path.read_text().splitlines():
        seq, *times = line.split()
        out[seq] = [float(t) for t in times]
    return out


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def sample(system: System, seconds: float) -> dict[str, float]:
    """One timed run: jobs/s started in the producers' window, commit → start p50/p99."""
    log = system.work.with_suffix(".starts")
    log.unlink(missing_ok=True)
    system.prepare()
    procs = system.start(log)
    try:
        system.probe()
        if not system.until_empty(READY_S, procs):
            raise RuntimeError(f"{system.kind} consumers never took the probe job")
        outcome = run(system.producers(seconds), timeout_s=seconds + 120)
        drained = system.until_empty(DRAIN_S, procs)
        time.sleep(0.5)  # the last claimed jobs run
        give_up = time.time()
    finally:
        _stop(procs)
    w0 = min(r["w0"] for r in outcome.results)
    w1 = max(r["w1"] for r in outcome.results)
    starts = _read(log)
    commits = {}
    for k in range(PRODUCERS):
        commits.update({s: t[0] for s, t in _read(Path(f"{system.work}-p{k}.log")).items()})
    # A job never started counts with the time it had waited when we gave up (a floor).
    lat = [(starts.get(s, [give_up])[0] - t) * 1000 for s, t in commits.items()]
    unstarted = sum(1 for s in commits if s not in starts)
    if unstarted or not drained:
        print(f"  [{NAME}] {system.kind}: {unstarted:,} jobs never started", flush=True)
    q = statistics.quantiles(lat, n=100, method="inclusive")
    inside = sum(1 for s, t in starts.items() if s != "probe" and w0 <= t[0] <= w1)
    out = {
        "jobs/s": inside / (w1 - w0),
        "committed/s": len(commits) / (w1 - w0),
        "p50": q[49],
        "p99": q[98],
    }
    legs = [(starts[s], t) for s, t in commits.items() if len(starts.get(s, ())) == 2]
    if legs and len(legs) == len(commits):  # ours: enqueued_at splits the path
        out["p99 commit → queue (relay leg)"] = _p99([(h - t) * 1000 for (_, h), t in legs])
        out["p99 queue → start (worker leg)"] = _p99([(s - h) * 1000 for (s, h), _ in legs])
    return out


def _case(system: System, label: str, seconds: float, warm_s: float) -> Case:
    return Case(
        label,
        functools.partial(sample, system, seconds),
        unit="ms",
        higher_is_better=False,
        warmup=functools.partial(sample, system, warm_s),
        metrics=METRICS,
        pending=missing("worker") or missing("relay"),
    )


def plan(ctx: Ctx) -> Plan:
    seconds = ctx.size(60, 15)
    warm_s = ctx.size(15, 5)
    ours = System("outbox", servers.fresh("postgresql", "outbox_bench_pipeline"))
    connect(ours.url).close()
    theirs = System("pgqueuer", servers.fresh("postgresql", "pgqueuer_bench_pipeline"))
    cases = [_case(ours, OURS, seconds, warm_s)]
    baseline = os.environ.get("BENCH_PIPELINE_BASELINE")
    if baseline:  # the same database: samples run one at a time, each from empty tables
        before = System("outbox", ours.url, root=Path(baseline).resolve(), tag="-baseline")
        cases.append(_case(before, f"{OURS} @ {Path(baseline).name}", seconds, warm_s))
    p = Plan(cases=[*cases, _case(theirs, THEIRS, seconds, warm_s)])
    p.targets = [
        Target(
            "pipeline jobs/s >= 1.0x pgqueuer's (8 producers, 1 consumer)",
            f"{NAME}: {OURS} jobs/s",
            [f"{NAME}: {THEIRS} jobs/s"],
            ">=",
            1.0,
        ),
        Target(
            "pipeline p99 (8 producers, relay --watch, one default worker): record() "
            "commit → handler start <= 50 ms",
            f"{NAME}: {OURS} p99",
            None,
            "<=",
            50.0,
        ),
        Target(
            "pipeline p99 vs pgqueuer's commit → handler start p99 (no target)",
            f"{NAME}: {OURS} p99",
            [f"{NAME}: {THEIRS} p99"],
            "<=",
            float("inf"),
        ),
    ]
    p.notes.append(
        f"pipeline: {PRODUCERS} producer processes flat out for {seconds} s per sample "
        f"(warm-up {warm_s} s), one business row + one job per transaction; consumers "
        "fresh per sample; latency = handler start - producer's commit return, wall clock"
    )
    return p
