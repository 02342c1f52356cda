"""relay: pending intents handed off, rows/s, beside a raw one-statement move.

The raw move is the floor: insert into the queue and delete from the outbox in one
statement, no verification. Between the two sits a diagnostic on PostgreSQL: the
product's own ``relay_handoff`` statement in a bare loop (verification in SQL, no
Python around it). relay vs statement is what our Python and driver add; statement vs
raw move is what verifying in SQL costs.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.w_outbox import missing

NAME = "relay"
DIAGNOSTIC_BATCH = 500
BOUNDS = {100: 0.7, 500: 0.8, 2_000: 0.7}


@cache
def _rows(n: int) -> list[tuple[Any, ...]]:
    return list(data.intent_rows(0, n, "relay"))


def _preload(url: str, n: int) -> None:
    """``n`` pending intents (and their key rows) in freshly emptied tables, analysed."""
    conn = data.connect(url)
    data.clear(conn)
    data.load_intents(conn, _rows(n))
    data.analyze(conn)
    conn.close()


def relay_case(url: str, n: int, batch: int, label: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_outbox:relay", url=url, batch=batch)
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure, unit="rows/s", pending=missing("relay"))


def raw_case(url: str, n: int, batch: int, kind: str = "move") -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one(f"bench.w_raw:{kind}", url=url, batch=batch)
        return rate(o.total(), o.elapsed_s)

    return Case(raw_label(batch, kind), measure, unit="rows/s")


def raw_label(batch: int, kind: str = "move") -> str:
    if kind == "handoff_statement":
        return f"relay_handoff statement in a bare loop, {batch} rows/statement (diagnostic)"
    return f"raw move, {batch} rows/statement"


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(100_000, 20_000)
    batches = (100, 500, 2_000) if not ctx.quick else (500,)
    url = servers.fresh(ctx.backend, "outbox_bench_relay")
    p = Plan()
    raw_url = (
        servers.fresh(ctx.backend, "outbox_bench_rawmove") if ctx.backend == "postgresql" else None
    )
    for b in batches:
        p.cases.append(relay_case(url, n, b, f"outbox relay, batch {b}"))
        if raw_url:
            p.cases.append(raw_case(raw_url, n, b))
            p.targets.append(
                Target(
                    f"relay batch {b} >= {BOUNDS[b]:g}x raw move",
                    f"{NAME}: outbox relay, batch {b}",
                    [f"{NAME}: {raw_label(b)}"],
                    ">=",
                    BOUNDS[b],
                )
            )
    if raw_url:
        b = DIAGNOSTIC_BATCH
        p.cases.append(raw_case(raw_url, n, b, "handoff_statement"))
        p.targets += [
            Target(
                f"relay batch {b} vs its handoff statement alone (Python's share; no target)",
                f"{NAME}: outbox relay, batch {b}",
                [f"{NAME}: {raw_label(b, 'handoff_statement')}"],
                "<=",
                float("inf"),
            ),
            Target(
                f"handoff statement vs raw move, batch {b} (verification's share; no target)",
                f"{NAME}: {raw_label(b, 'handoff_statement')}",
                [f"{NAME}: {raw_label(b)}"],
                "<=",
                float("inf"),
            ),
        ]
    p.notes.append(f"relay: {n:,} pending intents per sample")
    return p
