"""memory: the worker's RSS over a long drain — after warm-up, start / peak / end.

The worker runs in its own process until the queue is empty; its RSS is
sampled every 250 ms with psutil, and the queue's remaining depth every second, so
"after warm-up" means after the first 10 % of the jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import data, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan
from bench.procs import ROOT
from bench.w_outbox import missing

NAME = "memory"
WARMUP = 0.10


def _drain_sampled(url: str, n: int) -> dict[str, float]:
    import psutil

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # The worker through its Python API, as `outbox worker --stop-when-empty` runs it.
    cmd = [sys.executable, "-m", "bench.w_outbox", url, "bench.w_outbox:APP", "16", "100", "1"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ps = psutil.Process(proc.pid)
    conn = data.connect(url, migrate=False)
    rss: list[tuple[float, float]] = []
    warm_at: float | None = None
    next_count = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        try:
            rss.append((now, ps.memory_info().rss / 2**20))
        except psutil.NoSuchProcess:
            break
        if warm_at is None and now >= next_count:
            left = conn.execute_sql("SELECT count(*) FROM outbox_jobs")[0][0]
            if left <= n * (1 - WARMUP):
                warm_at = now
            next_count = now + 1.0
        time.sleep(0.25)
    conn.close()
    if proc.wait() != 0:
        raise RuntimeError(f"worker exited {proc.returncode}")
    after = [m for t, m in rss if warm_at is not None and t >= warm_at] or [m for _, m in rss]
    return {"start": after[0], "peak": max(after), "end": after[-1]}


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(500_000, 50_000)
    url = servers.fresh("postgresql", "outbox_bench_memory")

    def measure() -> dict[str, float]:
        conn = data.connect(url)
        data.clear(conn)
        data.load_jobs(conn, n)
        data.analyze(conn)
        conn.close()
        return _drain_sampled(url, n)

    label = f"worker RSS over {n:,} jobs"
    p = Plan(rounds=1)
    p.cases.append(
        Case(label, measure, unit="MiB", higher_is_better=False, pending=missing("worker"))
    )
    p.targets.append(
        Target(
            "worker RSS peak after warm-up <= 1.10x RSS at warm-up",
            f"{NAME}: {label} peak",
            [f"{NAME}: {label} start"],
            "<=",
            1.10,
        )
    )
    p.notes.append(
        f"memory: one drain of {n:,} jobs, RSS sampled every 250 ms, "
        f"warm-up = first {WARMUP:.0%} of the jobs"
    )
    return p
