"""worker: drain pre-queued jobs, jobs/s, by processes/concurrency/prefetch, beside raw SQL.

One setting also drains with priorities in use (every job one of 0-9, changing from one
job to the next, so the claim's order is not the table's), interleaved with the same
setting without them in the same run: the target is >= 0.95x. A third case queues the
priorities in runs of 100 jobs: the claim then finds each batch on a few pages again, and
the difference between the two shows what the interleaving costs (the acknowledgement's
DELETE touches a page per job instead of a few per batch).
"""

from __future__ import annotations

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.w_outbox import missing

NAME = "worker"


def _remaining(url: str) -> int:
    conn = data.connect(url, migrate=False)
    try:
        return int(conn.execute_sql("SELECT count(*) FROM outbox_jobs")[0][0])
    finally:
        conn.close()


def _preload(url: str, n: int, priorities: str | None = None) -> None:
    """``n`` due jobs; with ``priorities``, each one of 0-9, written with the row (an
    update after the load would leave dead versions for the claim to skip):
    ``"interleaved"`` changes the priority from one job to the next, ``"runs"`` every
    ``RUN`` jobs (a burst of work of one priority, as a batch import queues it)."""
    conn = data.connect(url)
    data.clear(conn)
    if priorities is None:
        data.load_jobs(conn, n)
    else:
        step = 1 if priorities == "interleaved" else RUN
        rows = ((*row, (i // step * 7) % 10) for i, row in enumerate(data.job_rows(0, n)))
        data.load(conn, "outbox_jobs", f"{data.JOB_COLUMNS}, priority", rows)
    data.analyze(conn)
    conn.close()


RUN = 100


def worker_case(
    url: str,
    n: int,
    procs_n: int,
    conc: int,
    prefetch: int,
    label: str,
    *,
    priorities: str | None = None,
) -> Case:
    def measure() -> float:
        _preload(url, n, priorities)
        spec = Spec(
            "bench.w_outbox:worker", {"url": url, "concurrency": conc, "prefetch": prefetch}
        )
        o = procs.run([spec] * procs_n)
        return rate(n - _remaining(url), o.elapsed_s)

    return Case(label, measure, pending=missing("worker"))


def cli_defaults_case(url: str, n: int, label: str) -> Case:
    """One ``outbox worker`` with no tuning flags: what users run."""

    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_outbox:cli_worker", url=url)
        return rate(n - _remaining(url), o.elapsed_s)

    return Case(label, measure, pending=missing("worker"))


def label(procs_n: int, conc: int, prefetch: int) -> str:
    return f"outbox worker, {procs_n} proc, concurrency {conc}, prefetch {prefetch}"


PRIORITY_SETTING = (1, 16, 100)
PRIORITY_LABEL = f"{label(*PRIORITY_SETTING)}, priorities 0-9 in use"
PRIORITY_RUNS_LABEL = f"{label(*PRIORITY_SETTING)}, priorities 0-9 in runs of {RUN}"


RAW = {
    "claim_delete": "raw claim+delete, batches of 100",
    "claim_lease_delete": (
        "raw claim with lease + delete of the previous batch, 100 per statement (diagnostic)"
    ),
}


def raw_case(url: str, n: int, kind: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one(f"bench.w_raw:{kind}", url=url, batch=100, queue=data.QUEUE)
        return rate(o.total(), o.elapsed_s)

    return Case(RAW[kind], measure)


SETTINGS_FULL = [(1, 1, 100), (1, 16, 100), (1, 64, 100), (1, 16, 1), (1, 16, 1_000), (2, 16, 100)]
SETTINGS_QUICK = [(1, 16, 100), (1, 16, 1_000), (2, 16, 1_000)]


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 30_000)
    url = servers.fresh(ctx.backend, "outbox_bench_worker")
    p = Plan()
    for s in SETTINGS_QUICK if ctx.quick else SETTINGS_FULL:
        # Prefetch 1 is a round trip per job: a fifth of the jobs gives its rate in seconds.
        p.cases.append(worker_case(url, n // 5 if s[2] == 1 else n, *s, label(*s)))
    p.cases.append(worker_case(url, n, *PRIORITY_SETTING, PRIORITY_LABEL, priorities="interleaved"))
    p.cases.append(worker_case(url, n, *PRIORITY_SETTING, PRIORITY_RUNS_LABEL, priorities="runs"))
    p.targets.append(
        Target(
            "worker drain with priorities in use >= 0.95x the same setting without",
            f"{NAME}: {PRIORITY_LABEL}",
            [f"{NAME}: {label(*PRIORITY_SETTING)}"],
            ">=",
            0.95,
        )
    )
    p.targets.append(
        Target(
            "worker drain with priorities in runs of 100 vs the same setting without (no target)",
            f"{NAME}: {PRIORITY_RUNS_LABEL}",
            [f"{NAME}: {label(*PRIORITY_SETTING)}"],
            ">=",
            float("-inf"),
        )
    )
    if ctx.backend == "postgresql":
        raw_url = servers.fresh(ctx.backend, "outbox_bench_rawclaim")
        ours = [
            f"{NAME}: {c.name}"
            for c in p.cases
            if c.name.startswith("outbox worker, 1 ") and "priorities" not in c.name
        ]
        p.cases += [raw_case(raw_url, n, kind) for kind in RAW]
        p.targets.append(
            Target(
                "worker, best 1-process setting >= 0.5x raw claim+delete",
                ours,
                [f"{NAME}: {RAW['claim_delete']}"],
                ">=",
                0.5,
            )
        )
        # The floor of at-least-once with leases: a claim writes the row before the delete.
        # Compared at the same batch size: 100 jobs per claim.
        p.targets.append(
            Target(
                "worker c16/p100 vs raw claim with lease, 100 per statement (no target)",
                f"{NAME}: {label(1, 16, 100)}",
                [f"{NAME}: {RAW['claim_lease_delete']}"],
                "<=",
                float("inf"),
            )
        )
    p.notes.append(f"worker: {n:,} queued jobs per sample, no-op handler")
    return p
