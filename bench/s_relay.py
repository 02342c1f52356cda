"""relay: pending intents handed off, rows/s, beside a raw one-statement move."""

from __future__ import annotations

from functools import cache
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.w_outbox import missing

NAME = "relay"
DIAGNOSTIC_BATCH = 500


@cache
def _rows(n: int) -> list[tuple[Any, ...]]:
    return list(data.intent_rows(0, n, "relay"))


def _preload(url: str, n: int) -> None:
    """``n`` pending intents in freshly emptied tables, statistics up to date."""
    conn = data.connect(url)
    data.clear(conn)
    data.load(conn, "outbox_messages", data.INTENT_COLUMNS, iter(_rows(n)))
    data.analyze(conn)
    conn.close()


def relay_case(url: str, n: int, batch: int, label: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_outbox:relay", url=url, batch=batch)
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure, unit="rows/s", pending=missing("relay"))


def raw_case(url: str, n: int, batch: int, tombstones: bool = False) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_raw:move", url=url, batch=batch, tombstones=tombstones)
        return rate(o.total(), o.elapsed_s)

    return Case(raw_label(batch, tombstones), measure, unit="rows/s")


def raw_label(batch: int, tombstones: bool) -> str:
    if tombstones:
        return f"raw move keeping tombstones, {batch} rows/statement (diagnostic)"
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
                    f"relay batch {b} >= 0.8x raw move",
                    f"{NAME}: outbox relay, batch {b}",
                    [f"{NAME}: raw move, {b} rows/statement"],
                    ">=",
                    0.8,
                )
            )
    if raw_url:
        # The contract's floor: the same move, marking tombstones instead of deleting.
        p.cases.append(raw_case(raw_url, n, DIAGNOSTIC_BATCH, tombstones=True))
        p.targets.append(
            Target(
                f"relay batch {DIAGNOSTIC_BATCH} vs raw move keeping tombstones (no target)",
                f"{NAME}: outbox relay, batch {DIAGNOSTIC_BATCH}",
                [f"{NAME}: {raw_label(DIAGNOSTIC_BATCH, True)}"],
                "<=",
                float("inf"),
            )
        )
    p.notes.append(f"relay: {n:,} pending intents per sample")
    return p
