"""plans: the hot statements' query plans at 1,000,000 rows per table, on any backend.

The same table the tests check at 200,000 (``outbox.db.plans.HOT``), filled by the same
set-based seed, planned (EXPLAIN, not run) and printed as statement → what it reads →
through which index, with the verdict of the same check. Nothing is timed; the figure
is how many statements keep to their index (target: all). --quick seeds 200,000.
"""

from __future__ import annotations

from bench import data, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan

NAME = "plans"


def table(url: str, n: int) -> tuple[int, int, list[str]]:
    """Seed ``n`` rows per table, plan every hot statement; (kept, total, lines)."""
    from outbox.db import plans

    conn = data.connect(url)
    dialect = conn.dialect.name
    plans.seed(conn, n)
    lines = [
        f"plans at {n:,} rows per table ({dialect}):",
        "statement | what | plan: table, read, index | verdict",
        "--- | --- | --- | ---",
    ]
    kept = total = 0
    for hot in plans.HOT:
        if dialect not in hot.dialects:
            continue
        steps = plans.explain(conn, hot.statement, hot.params)
        why = plans.check(steps, hot, dialect)
        shown = "; ".join(
            f"{a.table} {a.kind}{'' if a.index is None else ' ' + a.index}"
            for a in steps
            if a.kind != "other"
        )
        lines.append(f"{hot.statement} | {hot.what} | {shown} | {why or 'ok'}")
        total += 1
        kept += why is None
    conn.close()
    return kept, total, lines


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(1_000_000, 200_000)
    url = servers.fresh(ctx.backend, f"outbox_bench_plans_{ctx.backend}")
    p = Plan(rounds=1)

    def measure() -> float:
        kept, total, lines = table(url, n)
        p.notes.append("\n".join(lines))
        print("\n".join(f"  [plans] {line}" for line in lines), flush=True)
        return kept / total if total else 0.0

    label = f"hot statements on their index, {n // 1000}k rows"
    p.cases.append(Case(label, measure, unit="share", warmup=lambda: None))
    p.targets.append(
        Target("every hot statement uses its index", f"{NAME}: {label}", None, ">=", 1.0)
    )
    return p
