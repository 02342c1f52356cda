"""backends: record, relay and worker at one setting each on SQLite and MariaDB."""

from __future__ import annotations

from bench import servers
from bench.core import Target
from bench.plan import Ctx, Plan
from bench.s_record import TXN_BOUND
from bench.s_record import cases as record_cases
from bench.s_relay import relay_case
from bench.s_worker import worker_case

NAME = "backends"


def plan(ctx: Ctx) -> Plan:
    p = Plan()
    n = ctx.size(20_000, 5_000)
    for backend in ("sqlite", "mariadb"):
        rec = record_cases(
            servers.fresh(backend, "outbox_bench_b_record"),
            ctx.size(2_000, 500),
            prefix=f"{backend}: ",
            modes=("plain", "byhand", "record"),
        )
        p.cases += rec
        p.cases.append(
            relay_case(
                servers.fresh(backend, "outbox_bench_b_relay"),
                n,
                500,
                f"{backend}: outbox relay, batch 500",
            )
        )
        p.cases.append(
            worker_case(
                servers.fresh(backend, "outbox_bench_b_worker"),
                n,
                1,
                16,
                100,
                f"{backend}: outbox worker, 1 proc, concurrency 16",
            )
        )
        plain, by_hand, ours = (f"{NAME}: {c.name}" for c in rec)
        bound = TXN_BOUND[backend]
        p.targets += [
            Target(
                f"{backend}: record() txn time <= {bound:.2f}x plain txn",
                ours,
                [plain],
                "<=",
                bound,
                per_op_time=True,
            ),
            Target(
                f"{backend}: by-hand floor of the two-row design: by-hand txn time vs plain "
                "txn (no target)",
                by_hand,
                [plain],
                "<=",
                float("inf"),
                per_op_time=True,
            ),
        ]
    p.notes.append(f"backends: relay and worker move {n:,} rows per sample")
    return p
