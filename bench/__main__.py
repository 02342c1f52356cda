"""``python -m bench [--backend B] [--quick] [--only SCENARIO[,SCENARIO]] [--rounds N]``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import report, servers
from bench.core import Result, Target, measure_rounds
from bench.plan import Ctx, Plan

SCENARIOS = (
    "record",
    "relay",
    "worker",
    "peers",
    "latency",
    "pipeline",
    "backlog",
    "memory",
    "backends",
    "dashboard",
    "tally",
    "plans",
    "hygiene",
    "nats",
    "redis_worker",
    "redis",
    "limits",
    "tracing",
    "workflow",
    "ordering",
    "held_xmin",
    "ring_costs",
)
ANY_BACKEND = (
    "record", "relay", "worker", "tally", "plans", "limits", "tracing", "workflow", "ordering"
)


def _args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--backend", choices=["postgresql", "sqlite", "mariadb"], default="postgresql")
    ap.add_argument("--quick", action="store_true", help="a ~2-3 minute pass, fewer rows")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (>= 3 advised)")
    ap.add_argument(
        "--no-warmup", action="store_true", help="skip the uncounted warm-up round (debugging)"
    )
    ap.add_argument("--out", type=Path, default=report.RESULTS / "latest.json")
    ap.add_argument("--chart", type=Path, default=report.RESULTS / "latest.png")
    ns = ap.parse_args(argv)
    chosen = [s.strip() for s in ns.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if ns.rounds < 1:
        ap.error("--rounds must be at least 1")
    if ns.backend != "postgresql":
        skipped = [s for s in chosen if s not in ANY_BACKEND]
        if skipped and ns.only:
            ap.error(f"{', '.join(skipped)} run on postgresql only")
        chosen = [s for s in chosen if s in ANY_BACKEND]
    ns.scenarios = chosen
    return ns


def _run_scenario(name: str, ctx: Ctx) -> tuple[list[Result], Plan]:
    module = importlib.import_module(f"bench.s_{name}")
    print(f"\n>> {name}", flush=True)
    plan: Plan = module.plan(ctx)
    try:
        results = measure_rounds(name, plan.cases, plan.rounds or ctx.rounds, ctx.warmup)
    finally:
        for step in plan.after:
            step()
    return results, plan


def main(argv: list[str] | None = None) -> int:
    ns = _args(sys.argv[1:] if argv is None else argv)
    ctx = Ctx(backend=ns.backend, quick=ns.quick, rounds=ns.rounds, warmup=not ns.no_warmup)
    started = time.monotonic()
    results: list[Result] = []
    targets: list[Target] = []
    notes: list[str] = []
    try:
        for name in ns.scenarios:
            rs, plan = _run_scenario(name, ctx)
            results += rs
            targets += plan.targets
            notes += plan.notes
    finally:
        servers.drop_all()
    rows = {f"{r.scenario}: {r.case}": r for r in results}
    for t in targets:
        t.evaluate(rows)
    took = time.monotonic() - started
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    meta = {
        "command": command.strip(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(took, 1),
        "backend": ns.backend,
        "quick": ns.quick,
        "rounds": ns.rounds,
        "warmup": not ns.no_warmup,
        "machine": servers.machine(),
    }
    print(report.table(results))
    print(report.targets_table(targets))
    for note in notes:
        print(f"\nnote: {note}")
    report.write_json(ns.out, meta, results, targets, notes)
    title = f"outbox bench — {meta['when']} — {command.strip()}"
    report.chart(ns.chart, results, targets, title)
    doc = json.loads(ns.out.read_text())
    ns.out.with_suffix(".md").write_text(
        report.markdown(doc, os.path.relpath(ns.chart, ns.out.parent))
    )
    print(f"\nwrote {ns.out}, {ns.out.with_suffix('.md')} and {ns.chart} in {took:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
