"""peers: the same drain and enqueue workloads through pgqueuer, procrastinate and oban-py.

Each system has its own database on the same server; every case is interleaved with
ours round by round. Slow peers drain fewer jobs per sample (their rate is what counts).
"""

from __future__ import annotations

import functools
import itertools
import subprocess
from collections.abc import Callable

from bench import oban_env, procs, servers, w_pgqueuer, w_procrastinate, w_record
from bench.core import Case, Target
from bench.plan import PY, Ctx, Plan, rate
from bench.procs import Spec
from bench.s_tracing import snapshot
from bench.s_worker import cli_defaults_case, worker_case
from bench.w_outbox import missing

NAME = "peers"
DEFAULTS = "drain: `outbox worker` with the CLI defaults (no tuning flags), 1 proc"
SINGLES = 3_000  # enqueue-one-at-a-time samples: a few seconds for every system
TODAY = "today's code"  # our producers' cases timed again with the merge base's package
_TODAY_MODES = ("record_single", "record_batch_1000", "push_batch_1000")
_tag = itertools.count()


def _drain(label: str, prepare: Callable[[], None], specs: list[Spec]) -> Case:
    def measure() -> float:
        prepare()
        o = procs.run(specs)
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure)


def _enqueue(label: str, spec: Spec, before: Callable[[], None] | None = None) -> Case:
    def measure() -> float:
        if before:
            before()
        o = procs.run([spec])
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure)


def _pgqueuer(ctx: Ctx, n: int) -> list[Case]:
    url = servers.fresh("postgresql", "pgqueuer_bench")
    settings = [("asyncpg", 100, 1), ("asyncpg", 100, 2)]
    if not ctx.quick:
        settings += [("asyncpg", 10, 1), ("psycopg", 100, 1), ("psycopg", 10, 1)]
    out = []
    for driver, batch, k in settings:
        spec = Spec("bench.w_pgqueuer:drain", {"url": url, "batch": batch, "driver": driver})
        # Its psycopg driver and batch 10 drain several times slower here: fewer jobs.
        size = n if (driver, batch) == ("asyncpg", 100) else n // 5
        out.append(
            _drain(
                f"drain: pgqueuer {driver}, batch {batch}, {k} proc",
                functools.partial(w_pgqueuer.prepare, url, size),
                [spec] * k,
            )
        )
    for mode in ("single", "list", "list1000"):
        m = SINGLES if mode == "single" else n
        out.append(
            _enqueue(
                f"enqueue {mode}: pgqueuer",
                Spec("bench.w_pgqueuer:enqueue", {"url": url, "n": m, "mode": mode}),
            )
        )
    return out


def _procrastinate(ctx: Ctx, n: int) -> list[Case]:
    url = servers.fresh("postgresql", "procrastinate_bench")
    out = []
    for c in (50,) if ctx.quick else (1, 50):
        size = n if c > 1 else n // 2
        spec = Spec("bench.w_procrastinate:drain", {"url": url, "concurrency": c})
        out.append(
            _drain(
                f"drain: procrastinate, concurrency {c}, 1 proc",
                functools.partial(w_procrastinate.prepare, url, size),
                [spec],
            )
        )
    if not ctx.quick:
        for mode in ("single", "list"):
            out.append(
                _enqueue(
                    f"enqueue {mode}: procrastinate",
                    Spec("bench.w_procrastinate:enqueue", {"url": url, "n": SINGLES, "mode": mode}),
                )
            )
    return out


def _oban(ctx: Ctx, n: int) -> tuple[list[Case], str | None]:
    try:
        py = oban_env.ensure()
    except subprocess.CalledProcessError as exc:
        return [], f"oban-py skipped: making its environment failed ({exc.cmd[-1]})"
    if py is None:
        return [], "oban-py skipped: it needs Python >= 3.12 and none was found"
    url = servers.fresh("postgresql", "oban_bench")
    out = []
    for limit in (100,) if ctx.quick else (10, 100):

        def prepare(url: str = url, py: str = py) -> None:
            procs.run_one("bench.w_oban:prepare", python=py, url=url, n=n)

        spec = Spec("bench.w_oban:drain", {"url": url, "limit": limit, "n": n}, py)
        out.append(_drain(f"drain: oban-py, limit {limit}, 1 proc", prepare, [spec]))
    if not ctx.quick:
        for mode in ("single", "list"):
            out.append(
                _enqueue(
                    f"enqueue {mode}: oban-py",
                    Spec(
                        "bench.w_oban:enqueue",
                        {"url": url, "n": SINGLES if mode == "single" else n, "mode": mode},
                        py,
                    ),
                )
            )
    return out, None


def _ours(ctx: Ctx, n: int) -> list[Case]:
    url = servers.fresh("postgresql", "outbox_bench_peers")
    rec_url = servers.fresh("postgresql", "outbox_bench_peers_rec")
    # Our best setting against each peer's best: prefetch 1,000 claims in big batches.
    out = [
        worker_case(
            url, n, k, 16, 1_000, f"drain: outbox worker, concurrency 16, prefetch 1000, {k} proc"
        )
        for k in (1, 2)
    ]
    out.append(cli_defaults_case(url, n, DEFAULTS))
    many = min(n, 20_000)
    modes = [
        ("record_single", "single: outbox record() + COMMIT", SINGLES),
        ("record_batch", "list: outbox record() x100 per txn", many),
        ("record_batch_1000", "list1000: outbox record_many() x1000 per txn", many),
        ("byhand_single", "single: by hand, record()'s two rows + COMMIT (diagnostic)", SINGLES),
        (
            "byhand_batch_1000",
            "list1000: by hand, record_many()'s statement on hand-built rows (diagnostic)",
            many,
        ),
        ("push_batch_1000", "list1000: outbox push_many() x1000 per txn", many),
    ]
    today = snapshot()  # the same producers with the outbox package at the merge base
    again = [(x, today) for x in modes if x[0] in _TODAY_MODES]
    for (mode, label, m), src in [(x, "") for x in modes] + again:
        out.append(
            _enqueue(
                f"enqueue {label}" + (f" ({TODAY})" if src else ""),
                Spec(
                    "bench.w_record:producer",
                    {"url": rec_url, "n": m, "mode": mode, "tag": f"p{next(_tag)}", "src": src},
                    PY,
                ),
                before=lambda: w_record.prepare(rec_url),
            )
        )
    return out


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 30_000)
    p = Plan()
    p.cases += _ours(ctx, n)
    p.cases += _pgqueuer(ctx, n)
    p.cases += _procrastinate(ctx, ctx.size(3_000, 300))
    oban, note = _oban(ctx, ctx.size(10_000, 2_000))
    p.cases += oban
    if note:
        p.notes.append(note)
    p.targets += _targets(p.cases)
    p.notes.append(
        f"peers: outbox and pgqueuer (asyncpg, batch 100) drain {n:,} jobs per sample, "
        f"pgqueuer's other settings {n // 5:,}; procrastinate {ctx.size(3_000, 300):,} "
        f"(concurrency 1: half); oban-py {ctx.size(10_000, 2_000):,}; enqueue single "
        f"{SINGLES:,}, enqueue list and list1000 {min(n, 20_000):,} (ours) / {n:,} (pgqueuer) / "
        f"{SINGLES:,} (procrastinate) / {ctx.size(10_000, 2_000):,} (oban-py)"
    )
    return p


def _targets(cases: list[Case]) -> list[Target]:
    names = [f"{NAME}: {c.name}" for c in cases]

    def pick(*words: str, today: bool = False) -> list[str]:
        return [x for x in names if all(w in x for w in words) and (TODAY in x) == today]

    peers_drain_1 = [x for x in pick("drain:", "1 proc") if "outbox" not in x]
    tuned_1 = [x for x in pick("outbox worker", "1 proc") if x != f"{NAME}: {DEFAULTS}"]
    ts = [
        Target(
            "drain, no flags (CLI defaults), 1 proc >= 3x pgqueuer's best 1-proc setting",
            [f"{NAME}: {DEFAULTS}"],
            pick("pgqueuer", "1 proc"),
            ">=",
            3.0,
        ),
        Target(
            "drain, tuned (c16 p1000), 1 proc >= 2x pgqueuer's best 1-proc setting",
            tuned_1,
            pick("pgqueuer", "1 proc"),
            ">=",
            2.0,
        ),
        Target(
            "drain, 2 procs >= 1.5x pgqueuer 2 procs",
            pick("outbox worker", "2 proc"),
            pick("pgqueuer", "2 proc"),
            ">=",
            1.5,
        ),
        Target(
            "drain, tuned, 1 proc: ours / best peer",
            tuned_1,
            peers_drain_1,
            ">=",
            1.0,
        ),
        Target(
            "batch recording >= 1.0x pgqueuer list enqueue",
            pick("enqueue list: outbox"),
            pick("enqueue list: pgqueuer"),
            ">=",
            1.0,
        ),
        Target(
            "enqueue list: ours / best peer",
            pick("enqueue list: outbox"),
            [x for x in pick("enqueue list:") if "outbox" not in x],
            ">=",
            1.0,
        ),
    ]
    ts += [
        Target(
            "single record()+COMMIT >= 1.0x pgqueuer single enqueue",
            pick("enqueue single: outbox"),
            pick("enqueue single: pgqueuer"),
            ">=",
            1.0,
        ),
        Target(
            "record_many of 1,000 >= 1.0x pgqueuer list enqueue of 1,000",
            pick("enqueue list1000: outbox record_many()"),
            pick("enqueue list1000: pgqueuer"),
            ">=",
            1.0,
        ),
        Target(
            "push_many of 1,000 >= 1.2x pgqueuer list enqueue of 1,000",
            pick("enqueue list1000: outbox push_many()"),
            pick("enqueue list1000: pgqueuer"),
            ">=",
            1.2,
        ),
    ]
    ts += [
        Target(
            "by-hand floor: record()'s two rows by hand + COMMIT vs pgqueuer single (no target)",
            pick("enqueue single: by hand"),
            pick("enqueue single: pgqueuer"),
            ">=",
            float("inf"),
        ),
        Target(
            "by-hand floor: record_many()'s statement on 1,000 hand-built rows vs pgqueuer "
            "list of 1,000 (no target)",
            pick("enqueue list1000: by hand"),
            pick("enqueue list1000: pgqueuer"),
            ">=",
            float("inf"),
        ),
    ]
    ts += [
        Target(
            f"{TODAY}: {what} vs pgqueuer (no target; before this change)",
            pick(f"enqueue {mode}: outbox {call}", today=True),
            pick(f"enqueue {mode}: pgqueuer"),
            ">=",
            float("inf"),
        )
        for what, mode, call in (
            ("single record()+COMMIT", "single", "record()"),
            ("record_many of 1,000", "list1000", "record_many()"),
            ("push_many of 1,000", "list1000", "push_many()"),
        )
    ]
    single = pick("enqueue single: outbox")
    if single:
        ts.append(
            Target(
                "enqueue single: ours / best peer",
                single,
                [x for x in pick("enqueue single:") if "outbox" not in x and "by hand" not in x],
                ">=",
                1.0,
            )
        )
    if missing("worker"):
        for t in ts[:4]:
            t.detail = "pending product"
    return ts
