"""ordering: what ordering keys cost jobs without one, and the throughput of ordered jobs.

- Drain of keyless no-op jobs by one worker (concurrency 16, prefetch 100), beside the
  same drain with ordered jobs waiting in another queue (their rows sit past every due
  time in the claim index, so the claim's range scan stops before them): the keyless
  path's cost. Target: >= 0.95x. A keyless claim, acknowledgement and handoff run the
  same statements as before ordering keys (one column more in RETURNING); only a job
  with a key takes the key's row lock.
- Drain of ordered no-op jobs with 1, 10 and 1,000 distinct keys by the same worker:
  jobs/s (no target). One key runs one job at a time, so with 1 key the drain is a
  chain of claim → run → ack-and-promote round trips.
"""

from __future__ import annotations

from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.w_ordering import load_ordered

NAME = "ordering"
KEYLESS = "drain, keyless jobs, 1 proc c16 p100"
BESIDE = "drain, keyless jobs, ordered jobs waiting in another queue, 1 proc c16 p100"


def _ordered_label(keys: int) -> str:
    return f"drain, ordered jobs, {keys:,} keys, 1 proc c16 p100"


def _reset(url: str) -> Any:
    conn = data.connect(url)
    data.clear(conn)
    conn.execute_sql("DELETE FROM outbox_ordering_keys")
    return conn


def _drain(url: str) -> float:
    spec = Spec("bench.w_ordering:worker", {"url": url, "concurrency": 16, "prefetch": 100})
    o = procs.run([spec])
    return rate(o.total(), o.elapsed_s)


def keyless_case(url: str, n: int, beside: bool) -> Case:
    def measure() -> float:
        conn = _reset(url)
        data.load_jobs(conn, n)
        if beside:
            load_ordered(conn, n, 100, queue_suffix=".elsewhere")
        data.analyze(conn)
        conn.close()
        return _drain(url)

    return Case(BESIDE if beside else KEYLESS, measure)


def ordered_case(url: str, n: int, keys: int) -> Case:
    def measure() -> float:
        conn = _reset(url)
        load_ordered(conn, n, keys)
        data.analyze(conn)
        conn.close()
        return _drain(url)

    return Case(_ordered_label(keys), measure)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(20_000, 5_000)
    small = ctx.size(3_000, 1_000)  # one key is a chain of round trips: fewer jobs
    url = servers.fresh(ctx.backend, "outbox_bench_ordering")
    p = Plan()
    p.cases += [keyless_case(url, n, False), keyless_case(url, n, True)]
    p.cases += [ordered_case(url, small if k == 1 else n, k) for k in (1, 10, 1_000)]
    p.targets.append(
        Target(
            "keyless drain beside waiting ordered jobs >= 0.95x the keyless drain",
            f"{NAME}: {BESIDE}",
            [f"{NAME}: {KEYLESS}"],
            ">=",
            0.95,
        )
    )
    for k in (1, 10, 1_000):
        label = _ordered_label(k)
        p.targets.append(
            Target(f"{label}: jobs/s (no target)", f"{NAME}: {label}", None, "<=", float("inf"))
        )
    p.notes.append(
        f"ordering: {n:,} queued no-op jobs per keyless drain sample and per ordered drain "
        f"with 10 and 1,000 keys, {small:,} with 1 key"
    )
    return p
