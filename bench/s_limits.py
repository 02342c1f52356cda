"""limits: what the global-limits gate costs jobs without limits, and how close a limited
job name runs to its limit.

- Drain of no-op jobs by one worker (concurrency 16, prefetch 100) with a registry that
  has no limited name (the gate is never consulted) beside one that has (every claimed
  job is checked against the registry's limited names, none matches): the unlimited
  path's cost. Target: >= 0.95x.
- ``concurrency=4`` on a name whose handler sleeps 20 ms (a limit of 200 jobs/s), drained
  by 2 worker processes of concurrency 8: jobs/s as a share of 200.
- ``rate="200/s"`` on a no-op name, 2 processes of concurrency 8: the sustained start
  rate (``rate`` starts over the mean span of ``rate`` consecutive starts) and the
  busiest window (most starts in any 1 s), each as a share of 200.
"""

from __future__ import annotations

import bisect

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.w_limits import CONCURRENCY, HANDLER_S, LIMITED, RATE

NAME = "limits"
PLAIN = "drain, registry without limits (gate off), 1 proc c16 p100"
GATED = "drain, registry with a limited name (gate on, jobs unlimited), 1 proc c16 p100"
CONC = f"concurrency={CONCURRENCY}, {HANDLER_S * 1000:.0f} ms handlers, 2 procs c8"
RATED = f"rate={RATE}/s, no-op handlers, 2 procs c8"


def _preload(url: str, n: int, job_name: str | None = None) -> None:
    conn = data.connect(url)
    data.clear(conn)
    conn.execute_sql("DELETE FROM outbox_limit_slots")
    conn.execute_sql("DELETE FROM outbox_limit_starts")
    conn.execute_sql("DELETE FROM outbox_limit_waits")
    data.load_jobs(conn, n)
    if job_name is not None:
        conn.execute_sql(f"UPDATE outbox_jobs SET job_name = '{job_name}'")
    data.analyze(conn)
    conn.close()


def drain_case(url: str, n: int, kind: str, label: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        spec = Spec("bench.w_limits:worker", {"url": url, "kind": kind, "concurrency": 16})
        spec.kwargs["prefetch"] = 100
        o = procs.run([spec])
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure)


def concurrency_case(url: str, n: int) -> Case:
    limit = CONCURRENCY / HANDLER_S

    def measure() -> float:
        _preload(url, n, LIMITED)
        args = {"url": url, "kind": "concurrency", "concurrency": 8, "prefetch": None}
        o = procs.run([Spec("bench.w_limits:worker", args)] * 2)
        return rate(o.total(), o.elapsed_s) / limit

    return Case(CONC, measure, unit="x limit")


def rate_case(url: str, n: int) -> Case:
    def measure() -> dict[str, float]:
        _preload(url, n, LIMITED)
        args = {"url": url, "kind": "rate", "concurrency": 8, "prefetch": None}
        o = procs.run([Spec("bench.w_limits:worker", args)] * 2)
        starts = sorted(t for r in o.results for t in r["starts"])
        spans = [starts[i] - starts[i - RATE] for i in range(RATE, len(starts))]
        sustained = RATE / (sum(spans) / len(spans)) if spans else 0.0
        busiest = max(bisect.bisect_right(starts, t + 1.0) - i for i, t in enumerate(starts))
        return {"sustained": sustained / RATE, "busiest 1 s window": busiest / RATE}

    return Case(RATED, measure, unit="x limit")


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 15_000)
    url = servers.fresh(ctx.backend, "outbox_bench_limits")
    p = Plan()
    p.cases += [drain_case(url, n, "plain", PLAIN), drain_case(url, n, "gated", GATED)]
    # The limited cases churn their rows (deferrals, tickets): a database of their own
    # keeps that from the drains' measurements.
    limited_url = servers.fresh(ctx.backend, "outbox_bench_limited")
    p.cases += [
        concurrency_case(limited_url, ctx.size(800, 400)),
        rate_case(limited_url, ctx.size(1000, 600)),
    ]
    p.targets.append(
        Target(
            "drain of unlimited jobs, gate on >= 0.95x gate off",
            f"{NAME}: {GATED}",
            [f"{NAME}: {PLAIN}"],
            ">=",
            0.95,
        )
    )
    p.targets.append(
        Target(
            f"{CONC}: jobs/s as a share of the limit (no target)",
            f"{NAME}: {CONC}",
            None,
            "<=",
            float("inf"),
        )
    )
    p.targets.append(
        Target(
            f"{RATED}: busiest 1 s window <= 1.0x the limit",
            f"{NAME}: {RATED} busiest 1 s window",
            None,
            "<=",
            1.0,
        )
    )
    p.targets.append(
        Target(
            f"{RATED}: sustained start rate >= 0.9x the limit",
            f"{NAME}: {RATED} sustained",
            None,
            ">=",
            0.9,
        )
    )
    p.notes.append(
        f"limits: {n:,} queued no-op jobs per drain sample; limited cases drain a few "
        "hundred jobs of the limited name"
    )
    return p
