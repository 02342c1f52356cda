"""ring_costs: what the ring storage costs when nothing holds the xmin horizon.

Issue 39's no-hold targets, heap (today's ``outbox_jobs``) and ring side by side, the
two storages interleaved in every round, each in its own database of one private
PostgreSQL 15 cluster with the server's defaults (autovacuum on, fsync on; as
``held_xmin``):

- **drain**: ``outbox worker`` with no flags, 1 process, through ``N`` queued no-op
  jobs (``bench.w_outbox:cli_worker``, as the ``worker`` scenario's CLI case).
  Target: ring >= 0.95x heap.
- **push_many**: ``push_many`` of 100 jobs, one commit each, on an otherwise idle
  database; p50. Target: within +-10 %.
- **steady**: ``held_xmin``'s rig with no hold: 1,000 jobs/s offered through
  ``push_many``, one ``outbox worker`` with the CLI's defaults; claim p50/p95/p99 over
  ``STEADY_S`` seconds after a warm-up, and the producer's ``push_many`` p50 under that
  load. The claim's figures are the round trip of the driver's claim calls; the ring's
  rotation passes, which the worker runs in a thread beside its claims, are timed apart
  (the notes).
- **latency**: commit -> handler start, idle, through ``record()`` -> ``outbox relay
  --watch`` -> worker and through ``push`` -> worker (``latency``'s rig); p50. Target:
  within +-10 %.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from bench import data, procs
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.s_held_xmin import prepare
from bench.s_held_xmin import run as steady_run
from bench.s_hygiene import DefaultCluster
from bench.s_latency import Rig
from bench.s_worker import _preload, _remaining

NAME = "ring_costs"
STORAGES = ("heap", "ring")
STEADY_S = 40.0
PUSH_CALLS = 200
PROBES = int(os.environ.get("OUTBOX_BENCH_RING_PROBES", "60"))
# OUTBOX_BENCH_RING_KINDS: a subset of drain,push,steady,latency (default all)
KINDS = os.environ.get("OUTBOX_BENCH_RING_KINDS", "drain,push,steady,latency").split(",")


def _database(cluster: DefaultCluster, name: str, storage: str) -> str:
    admin = psycopg.connect(cluster.url(), autocommit=True)
    try:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    finally:
        admin.close()
    url = cluster.url(name)
    prepare(storage, url)
    return url


def drain_case(url: str, n: int, label: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_outbox:cli_worker", url=url)
        return rate(n - _remaining(url), o.elapsed_s)

    return Case(label, measure)


def push_case(url: str, label: str) -> Case:
    def measure() -> dict[str, float]:
        from outbox import Job, push_many

        took: list[float] = []
        with psycopg.connect(url) as conn:
            conn.execute("TRUNCATE outbox_jobs")
            conn.commit()
            for call in range(PUSH_CALLS):
                jobs = [Job(data.JOB_NAME, data.payload(call * 100 + i), queue="ring_costs_idle")
                        for i in range(100)]
                t = time.perf_counter()
                with conn.transaction():
                    push_many(conn, jobs)
                took.append((time.perf_counter() - t) * 1000)
            conn.execute("TRUNCATE outbox_jobs")
            conn.commit()
        return {"p50": statistics.median(took)}

    return Case(label, measure, unit="ms", higher_is_better=False)


def steady_case(cluster: DefaultCluster, storage: str, label: str, notes: list[str]) -> Case:
    def measure() -> dict[str, float]:
        fig, lines = steady_run(storage, cluster, 0, before_s=STEADY_S, db=f"steady_{storage}")
        notes.extend(lines)
        return {"claim p50": fig["p50"], "claim p95": fig["p95"], "claim p99": fig["p99"],
                "push_many p50": fig["push"], "completed/s": fig["completed/s"]}

    metrics = {"completed/s": ("jobs/s", True)}
    return Case(label, measure, unit="ms", higher_is_better=False, warmup=lambda: None,
                metrics=metrics)


def latency_case(rig: Rig, label: str) -> Case:
    def measure() -> dict[str, float]:
        rig.start()
        out: dict[str, float] = {}
        for kind, name in (("record", "record->relay->worker p50"), ("push", "push->worker p50")):
            took = []
            for _ in range(PROBES):
                took.append(rig.probe(kind))
                time.sleep(0.03)
            out[name] = statistics.median(took)
        return out

    return Case(label, measure, unit="ms", higher_is_better=False)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(20_000, 10_000)
    cluster = DefaultCluster()
    cluster.start()
    p = Plan()
    p.after.append(cluster.destroy)
    rigs: list[Rig] = []
    sinks = Path(tempfile.mkdtemp(prefix="ring_costs_"))
    label: dict[tuple[str, str], str] = {}
    by_kind: dict[str, list[Case]] = {"drain": [], "push": [], "steady": [], "latency": []}
    for storage in STORAGES:
        url = _database(cluster, f"costs_{storage}", storage)
        lat_url = _database(cluster, f"latency_{storage}", storage)
        rig = Rig(lat_url, sinks / f"{storage}.sink")
        rigs.append(rig)
        names = {
            "drain": f"{storage}: drain, outbox worker (no flags), 1 process, {n:,} jobs",
            "push": f"{storage}: push_many of 100, idle database",
            "steady": f"{storage}: steady 1,000 jobs/s, 1 worker (defaults), {STEADY_S:.0f} s",
            "latency": f"{storage}: idle commit -> handler start",
        }
        label.update({(storage, k): v for k, v in names.items()})
        by_kind["drain"].append(drain_case(url, n, names["drain"]))
        by_kind["push"].append(push_case(url, names["push"]))
        by_kind["steady"].append(steady_case(cluster, storage, names["steady"], p.notes))
        by_kind["latency"].append(latency_case(rig, names["latency"]))
    for kind, cases in by_kind.items():  # heap and ring of one kind next to each other
        if kind in KINDS:
            p.cases.extend(cases)

    def stop_rigs() -> None:
        for rig in rigs:
            rig.stop()

    p.after.insert(0, stop_rigs)

    def ring_vs_heap(title: str, kind: str, metric: str, op: str, bound: float) -> None:
        m = f" {metric}" if metric else ""
        p.targets.append(Target(title, f"{NAME}: {label[('ring', kind)]}{m}",
                                [f"{NAME}: {label[('heap', kind)]}{m}"], op, bound))

    ring_vs_heap("drain, no flags, 1 process: ring vs heap >= 0.95x", "drain", "", ">=", 0.95)
    ring_vs_heap("push_many p50, idle: ring vs heap <= 1.1x", "push", "p50", "<=", 1.1)
    ring_vs_heap("push_many p50 at 1,000 jobs/s: ring vs heap <= 1.1x", "steady",
                 "push_many p50", "<=", 1.1)
    ring_vs_heap("record -> relay -> worker p50: ring vs heap <= 1.1x", "latency",
                 "record->relay->worker p50", "<=", 1.1)
    ring_vs_heap("push -> worker p50: ring vs heap <= 1.1x", "latency", "push->worker p50",
                 "<=", 1.1)
    ring_vs_heap("claim p95 at 1,000 jobs/s: ring vs heap (no target)", "steady", "claim p95",
                 "<=", float("inf"))
    ring_vs_heap("claim p50 at 1,000 jobs/s: ring vs heap (no target)", "steady", "claim p50",
                 "<=", float("inf"))
    p.notes.append(
        f"ring_costs: private PostgreSQL 15, server defaults (autovacuum on); drain of {n:,}"
        f" no-op jobs; push_many {PUSH_CALLS} calls of 100; steady {STEADY_S:.0f} s at"
        f" 1,000 jobs/s; {PROBES} idle probes per path"
    )
    return p
