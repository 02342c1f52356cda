"""tally: what the dashboard's per-minute completion counts cost the worker.

The same drain as the worker scenario (pre-queued no-op jobs, one process, concurrency
16, prefetch 100: the fastest setting, where a per-job cost shows most), once as shipped
and once with the counting switched off (``bench.w_outbox.NoTally``: nothing counted,
nothing written). The targets: the drain with counting keeps at least 98% of the rate
without, and spends at most 2% more of the worker process's CPU time per job (CPU time
moves less than wall time when other programs load the machine). Beside them, the
counting alone, timed in-process over batches of 100 acknowledgements (nanoseconds per
job), which no machine noise can hide.
"""

from __future__ import annotations

import time

from bench import procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.s_worker import _preload, _remaining

NAME = "tally"
BOUND = 0.98
SETTING = {"concurrency": 16, "prefetch": 100}


def _drain(url: str, n: int, tally: bool) -> Case:
    state = "on" if tally else "off"

    def measure() -> dict[str, float]:
        _preload(url, n)
        o = procs.run([Spec("bench.w_outbox:worker", {"url": url, **SETTING, "tally": tally})])
        done = n - _remaining(url)
        cpu_us = o.results[0]["cpu_s"] * 1e6 / max(done, 1)
        return {"rate": rate(done, o.elapsed_s), "cpu": cpu_us}

    return Case(f"worker drain, c16/p100, per-minute counts {state}", measure,
                metrics={"cpu": ("CPU us/job", False)})


def _count_cost() -> Case:
    """Nanoseconds per job of ``Tally.add`` over batches of 100 acknowledged jobs, one
    batch in four mixing two queues."""

    def measure() -> float:
        from outbox.db.rows import ClaimedJob
        from outbox.queue.throughput import SUCCEEDED, Tally

        def batch(queue: str) -> list[ClaimedJob]:
            return [ClaimedJob(i, "m", queue, "j", "{}", 1, None, 0, 0) for i in range(100)]

        tally = Tally("bench")
        mixed = batch("bench")[:90] + batch("other")[:10]
        batches = [batch("bench"), batch("bench"), batch("bench"), mixed]  # 1 in 4 mixed
        rounds = 5_000
        started = time.perf_counter()
        for _ in range(rounds):
            for jobs in batches:
                tally.add(SUCCEEDED, jobs)
        return (time.perf_counter() - started) * 1e9 / (rounds * 400)

    return Case("counting alone (Tally.add, batches of 100, 1 in 4 mixed)", measure, unit="ns/job",
                higher_is_better=False)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(200_000, 20_000)
    url = servers.fresh(ctx.backend, "outbox_bench_tally")
    on, off = _drain(url, n, True), _drain(url, n, False)
    p = Plan(cases=[on, off, _count_cost()])
    p.targets += [
        Target(f"worker drain with per-minute counts >= {BOUND}x without (jobs/s)",
               f"{NAME}: {on.name} rate", [f"{NAME}: {off.name} rate"], ">=", BOUND),
        Target(f"worker CPU per job with per-minute counts <= {2 - BOUND:.2f}x without",
               f"{NAME}: {on.name} cpu", [f"{NAME}: {off.name} cpu"], "<=", 2 - BOUND),
    ]
    p.notes.append(f"tally: {n:,} queued no-op jobs per drain sample, {ctx.backend}")
    p.rounds = max(ctx.rounds, 9)
    return p
