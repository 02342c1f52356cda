"""tracing: what OpenTelemetry tracing costs record() + relay + worker (issue 27, item 3).

Four settings of the same workload (``bench.w_tracing``), each in a fresh process:
today's code (a snapshot of the commit tracing branched from, which has no tracing
code), this code without the ``tracing`` extra, this code with the API but no tracer
provider, and this code with the SDK's provider set (every transaction in a span, spans
batched and dropped). The first three should be within noise of each other; the fourth
is what tracing everything costs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import orjson

from bench import servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan
from bench.procs import ROOT

NAME = "tracing"
SCRIPT = Path(__file__).resolve().parent / "w_tracing.py"
MODES = {
    "today": "today's code (before tracing)",
    "no-api": "tracing code, no tracing extra (API not importable)",
    "no-provider": "tracing code, API installed, no tracer provider",
    "provider": "tracing code, SDK provider set, every job traced",
}
METRICS = {
    "record txn/s": ("txn/s", True),
    "relay/s": ("intents/s", True),
    "record cpu us/txn": ("us", False),
    "worker cpu us/job": ("us", False),
}
OFF = (("no-api", "no extra"), ("no-provider", "no provider"))


def snapshot() -> str:
    """"Today's code": the ``outbox`` package at ``OUTBOX_BENCH_BASE`` (a commit or tag),
    by default where this branch left main, unpacked once.

    On main itself the default is this very commit, so a run there compares the code
    with itself: name the commit before the change (``OUTBOX_BENCH_BASE=c3579dc``)."""
    ref = os.environ.get("OUTBOX_BENCH_BASE") or subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.strip()
    base = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True,
        text=True, check=False,
    )
    if base.returncode != 0:
        raise SystemExit(f"bench: OUTBOX_BENCH_BASE={ref!r} is not a commit of this repository")
    base_sha = base.stdout.strip()
    folder = servers.WORK / f"today-{base_sha[:12]}"
    if not (folder / "outbox" / "__init__.py").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", base_sha, "outbox"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return str(folder)


def sample(src: str, url: str, mode: str, n: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), src, url, mode, str(n)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tracing workload {mode} failed: {done.stderr[-2000:]}")
    out: dict[str, float] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return out


def plan(ctx: Ctx) -> Plan:
    # A database per setting: today's migrations number their steps differently from this
    # code's, and a database one setting churns would slow the next one down.
    urls = {mode: servers.fresh(ctx.backend, f"outbox_bench_tracing_{mode.replace('-', '_')}")
            for mode in MODES}
    n = ctx.size(5_000, 1_000)
    today = snapshot()
    here = str(ROOT)
    cases = [
        Case(
            label,
            functools.partial(sample, today if mode == "today" else here, urls[mode], mode, n),
            unit="jobs/s",
            metrics=METRICS,
        )
        for mode, label in MODES.items()
    ]
    p = Plan(cases=cases)
    row = {mode: f"{NAME}: {label}" for mode, label in MODES.items()}
    p.targets = [
        Target(
            f"tracing off ({setting}) {metric} >= 0.95x today's",
            f"{row[mode]} {metric}",
            [f"{row['today']} {metric}"],
            ">=",
            0.95,
        )
        for mode, setting in OFF
        for metric in ("record txn/s", "worker jobs/s")
    ] + [
        Target(
            f"tracing off ({setting}) {metric} <= 1.05x today's",
            f"{row[mode]} {metric}",
            [f"{row['today']} {metric}"],
            "<=",
            1.05,
        )
        for mode, setting in OFF
        for metric in ("record cpu us/txn", "worker cpu us/job")
    ]
    p.notes.append(
        f"tracing: {n:,} record() transactions (one intent each), one relay drain, one "
        f"worker drain (concurrency 1, a no-op handler), on {ctx.backend}; each setting in "
        "a fresh process; 'today' is the outbox package at the merge base with main"
    )
    return p
