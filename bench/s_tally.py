"""tally: what the dashboard's per-minute completion counts cost the worker.

The same drain as the worker scenario (pre-queued no-op jobs, one process, concurrency
16, prefetch 100: the fastest setting, where a per-job cost shows most), once as shipped
and once with the counting switched off (``bench.w_outbox.NoTally``: nothing counted,
nothing written). The target: the drain with counting keeps at least 98% of the rate
without. Beside it, the counting alone, timed in-process over batches of 100
acknowledgements (nanoseconds per job), which no machine noise can hide.
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

    def measure() -> float:
        _preload(url, n)
        o = procs.run([Spec("bench.w_outbox:worker", {"url": url, **SETTING, "tally": tally})])
        return rate(n - _remaining(url), o.elapsed_s)

    return Case(f"worker drain, c16/p100, per-minute counts {state}", measure)


def _count_cost() -> Case:
    """Nanoseconds per job of ``Tally.add`` over batches of 100 jobs in two queues."""

    def measure() -> float:
        from outbox.queue.throughput import SUCCEEDED, Tally

        tally = Tally("bench")
        batch = ["bench"] * 90 + ["other"] * 10
        rounds = 20_000
        started = time.perf_counter()
        for _ in range(rounds):
            tally.add(SUCCEEDED, batch)
        return (time.perf_counter() - started) * 1e9 / (rounds * len(batch))

    return Case("counting alone (Tally.add, batches of 100)", measure, unit="ns/job",
                higher_is_better=False)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 20_000)
    url = servers.fresh(ctx.backend, "outbox_bench_tally")
    on, off = _drain(url, n, True), _drain(url, n, False)
    p = Plan(cases=[on, off, _count_cost()])
    p.targets.append(
        Target(f"worker drain with per-minute counts >= {BOUND}x without",
               f"{NAME}: {on.name}", [f"{NAME}: {off.name}"], ">=", BOUND)
    )
    p.notes.append(f"tally: {n:,} queued no-op jobs per drain sample, {ctx.backend}")
    p.rounds = max(ctx.rounds, 5)
    return p
