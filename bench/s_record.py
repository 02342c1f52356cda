"""record: a producer transaction with record() vs the same bytes into a plain table."""

from __future__ import annotations

import itertools

from bench import procs, servers, w_record
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.s_tracing import snapshot

NAME = "record"
_tag = itertools.count()


def _case(url: str, label: str, mode: str, n: int, src: str = "") -> Case:
    def measure() -> float:
        w_record.prepare(url)
        o = procs.run_one(
            "bench.w_record:producer", url=url, n=n, mode=mode, tag=f"r{next(_tag)}", src=src
        )
        return rate(o.total(), o.elapsed_s)

    unit = "txn/s" if mode not in w_record.PER_CALL else "intents/s"
    if mode.startswith("push"):
        unit = "jobs/s"
    return Case(f"{label}", measure, unit=unit)


def cases(
    url: str, n: int, prefix: str = "", modes: tuple[str, ...] = w_record.MODES
) -> list[Case]:
    labels = {
        "plain": "plain txn: business row + same bytes into plain table",
        "byhand": "by-hand txn: business row + record()'s row by hand (diagnostic)",
        "onerow": "one-row sketch txn: business row + intent holding its key, one INSERT "
        "(diagnostic)",
        "record": "record() txn: business row + record(), NOTIFY off",
        "record_notify": "record() txn: business row + record(), NOTIFY on",
        "raw_single": "raw single INSERT+COMMIT",
        "byhand_single": "record()'s two rows by hand + COMMIT (diagnostic)",
        "record_single": "record() alone + COMMIT (single intents)",
        "record_batch": "record_many() of 100 per txn (batch recording)",
        "record_batch_1000": "record_many() of 1,000 per txn (batch recording)",
        "byhand_batch_1000": "record_many()'s statement, 1,000 rows built by hand, per txn "
        "(diagnostic)",
        "push_batch_1000": "push_many() of 1,000 per txn (keyless batch)",
    }
    return [
        _case(url, prefix + labels[m], m, n * (5 if m in w_record.PER_CALL else 1)) for m in modes
    ]


# The modes timed a second time with the outbox package at the merge base with main
# (``bench.s_tracing.snapshot``): before and after of the producer's Python, one run.
TODAY = ("record", "record_single", "record_batch_1000", "push_batch_1000")
TODAY_PREFIX = "today's code: "


def today_cases(url: str, n: int, modes: tuple[str, ...] = TODAY) -> list[Case]:
    src = snapshot()
    return [
        _case(url, TODAY_PREFIX + c.name, m, n * (5 if m in w_record.PER_CALL else 1), src)
        for m, c in zip(modes, cases(url, n, modes=modes), strict=True)
    ]


# Issue 30's bound for the record() transaction against the plain one, per backend.
TXN_BOUND = {"postgresql": 1.15, "mysql": 1.40, "mariadb": 1.40, "sqlite": 1.30}


def plan(ctx: Ctx) -> Plan:
    url = servers.fresh(ctx.backend, "outbox_bench_record")
    n = ctx.size(3_000, 1_000)
    p = Plan(cases=cases(url, n) + today_cases(url, n))
    now, later = p.cases[: len(w_record.MODES)], p.cases[len(w_record.MODES) :]
    r = {k: f"{NAME}: {c.name}" for k, c in zip(w_record.MODES, now, strict=True)}
    was = {k: f"{NAME}: {c.name}" for k, c in zip(TODAY, later, strict=True)}
    bound = TXN_BOUND.get(ctx.backend, 1.15)
    p.targets = [
        Target(
            f"record() txn time <= {bound:.2f}x plain txn (NOTIFY off, {ctx.backend})",
            r["record"],
            [r["plain"]],
            "<=",
            bound,
            per_op_time=True,
        ),
        Target(
            "by-hand floor of the two-row design: by-hand txn time vs plain txn (no target)",
            r["byhand"],
            [r["plain"]],
            "<=",
            float("inf"),
            per_op_time=True,
        ),
        Target(
            "one-row sketch: its txn time vs plain txn (no target; the floor of a one-row design)",
            r["onerow"],
            [r["plain"]],
            "<=",
            float("inf"),
            per_op_time=True,
        ),
        Target(
            "today's code: record() txn time vs plain txn (no target; before this change)",
            was["record"],
            [r["plain"]],
            "<=",
            float("inf"),
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
            "single record()+COMMIT >= 0.85x raw INSERT+COMMIT",
            r["record_single"],
            [r["raw_single"]],
            ">=",
            0.85,
        ),
        Target(
            "by-hand floor of a single intent: its two rows by hand + COMMIT vs raw "
            "INSERT+COMMIT (no target)",
            r["byhand_single"],
            [r["raw_single"]],
            ">=",
            float("inf"),
        ),
        Target(
            "record_many of 1,000 vs its own statement on rows built by hand (our Python's "
            "share; no target)",
            r["record_batch_1000"],
            [r["byhand_batch_1000"]],
            ">=",
            float("inf"),
        ),
        Target(
            "today's code: single record()+COMMIT vs raw INSERT+COMMIT (no target)",
            was["record_single"],
            [r["raw_single"]],
            ">=",
            float("inf"),
        ),
    ] + [
        Target(
            f"{m}: this code / today's code, throughput (no target)",
            r[m],
            [was[m]],
            ">=",
            float("inf"),
        )
        for m in TODAY
    ]
    return p
