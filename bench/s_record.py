"""record: a producer transaction with record() vs the same bytes into a plain table."""

from __future__ import annotations

import itertools

from bench import procs, servers, w_record
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate

NAME = "record"
_tag = itertools.count()


def _case(url: str, label: str, mode: str, n: int) -> Case:
    def measure() -> float:
        w_record.prepare(url)
        o = procs.run_one("bench.w_record:producer", url=url, n=n, mode=mode, tag=f"r{next(_tag)}")
        return rate(o.total(), o.elapsed_s)

    return Case(f"{label}", measure, unit="txn/s" if mode != "record_batch" else "intents/s")


def cases(
    url: str, n: int, prefix: str = "", modes: tuple[str, ...] = w_record.MODES
) -> list[Case]:
    labels = {
        "plain": "plain txn: business row + same bytes into plain table",
        "byhand": "by-hand txn: business row + record()'s row by hand (diagnostic)",
        "record": "record() txn: business row + record(), NOTIFY off",
        "record_notify": "record() txn: business row + record(), NOTIFY on",
        "raw_single": "raw single INSERT+COMMIT",
        "record_single": "record() alone + COMMIT (single intents)",
        "record_batch": "record_many() of 100 per txn (batch recording)",
    }
    return [_case(url, prefix + labels[m], m, n * (5 if m == "record_batch" else 1)) for m in modes]


def plan(ctx: Ctx) -> Plan:
    url = servers.fresh(ctx.backend, "outbox_bench_record")
    n = ctx.size(3_000, 1_000)
    p = Plan(cases=cases(url, n))
    r = {k: f"{NAME}: {c.name}" for k, c in zip(w_record.MODES, p.cases, strict=True)}
    p.targets = [
        Target(
            "record() txn time <= 1.10x plain txn (NOTIFY off)",
            r["record"],
            [r["plain"]],
            "<=",
            1.10,
            per_op_time=True,
        ),
        Target(
            "record() txn time with NOTIFY on vs plain txn (the NOTIFY cost; no target)",
            r["record_notify"],
            [r["plain"]],
            "<=",
            float("inf"),
            per_op_time=True,
        ),
        Target(
            "single intents/s >= 0.9x raw INSERT+COMMIT",
            r["record_single"],
            [r["raw_single"]],
            ">=",
            0.9,
        ),
    ]
    return p
