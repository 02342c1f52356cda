"""backlog: relay and worker throughput with 10,000 vs 1,000,000 rows already present.

The filler is what a long-lived installation carries under schema v2: the key rows of
handed-off intents in ``outbox_keys`` (until ``outbox prune``; ``outbox_messages``
holds no tombstones any more), and in ``outbox_jobs`` half delayed jobs in the measured
queue (the claim must step over them) and half due jobs of another queue. Each sample
adds its own rows on top and removes them afterwards; the filler stays.
"""

from __future__ import annotations

import re
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.s_relay import _rows
from bench.w_outbox import missing

NAME = "backlog"
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01

FILL_KEYS = """
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT encode(sha256(('filler' || i)::bytea), 'hex'), gen_random_uuid()::text,
       repeat('0', 64), 0
FROM generate_series(1, %(n)s) AS i
"""
FILL_JOBS = """
INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts, available_at,
                         created_at)
SELECT gen_random_uuid()::text, CASE WHEN i %% 2 = 0 THEN 'bench' ELSE 'other' END,
       'bench.noop', '{"filler":true}', 0,
       CASE WHEN i %% 2 = 0 THEN %(future)s ELSE 0 END, 0
FROM generate_series(1, %(n)s) AS i
"""


class Store:
    """One database holding ``filler`` rows; ``reset()`` removes whatever a sample added."""

    def __init__(self, name: str, filler: int) -> None:
        self.url = servers.fresh("postgresql", name)
        self.filler = filler
        conn = data.connect(self.url)
        conn.execute_sql(FILL_KEYS, {"n": filler})
        conn.execute_sql(FILL_JOBS, {"n": filler, "future": FAR_FUTURE_MS})
        for table in ("outbox_keys", "outbox_messages", "outbox_jobs"):
            conn.execute_sql(f"VACUUM ANALYZE {table}")
        self.max_job = conn.execute_sql("SELECT max(id) FROM outbox_jobs")[0][0]
        conn.close()

    def reset(self, conn: Any) -> None:
        """Back to the filler alone, vacuumed as autovacuum would (it is off here)."""
        conn.execute_sql("DELETE FROM outbox_messages")
        conn.execute_sql("DELETE FROM outbox_keys WHERE created_at > 0")  # filler keys: 0
        conn.execute_sql("DELETE FROM outbox_jobs WHERE id > %(m)s", {"m": self.max_job})
        for table in ("outbox_keys", "outbox_messages", "outbox_jobs"):
            conn.execute_sql(f"VACUUM {table}")

    def ready(self, conn: Any) -> int:
        return int(
            conn.execute_sql(
                "SELECT count(*) FROM outbox_jobs WHERE id > %(m)s", {"m": self.max_job}
            )[0][0]
        )


def _relay_case(store: Store, n: int, label: str) -> Case:
    def measure() -> float:
        conn = data.connect(store.url, migrate=False)
        store.reset(conn)
        data.load_intents(conn, _rows(n))
        conn.close()
        o = procs.run_one("bench.w_outbox:relay", url=store.url, batch=500)
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure, unit="rows/s", pending=missing("relay"))


def _worker_case(store: Store, n: int, label: str) -> Case:
    def measure() -> float:
        conn = data.connect(store.url, migrate=False)
        store.reset(conn)
        data.load_jobs(conn, n)
        o = procs.run(
            [Spec("bench.w_outbox:worker", {"url": store.url, "concurrency": 16, "prefetch": 100})]
        )
        left = store.ready(conn)
        conn.close()
        return rate(n - left, o.elapsed_s)

    return Case(label, measure, pending=missing("worker"))


def _params(sql: str) -> dict[str, Any]:
    known = {
        "queue": data.QUEUE,
        "limit": 100,
        "worker": "explain",
        "lease_ms": 30_000,
        "batch_size": 500,
        "notify": False,
    }
    return {k: known.get(k) for k in re.findall(r"%\((\w+)\)s", sql)}


def explain(store: Store, n: int) -> list[str]:
    """EXPLAIN ANALYZE of the claim and the handoff at full backlog, rolled back."""
    conn = data.connect(store.url, migrate=False)
    out = []
    try:
        store.reset(conn)
        data.load_intents(conn, _rows(n))
        data.load_jobs(conn, n)
        data.analyze(conn)
        for name in ("job_claim", "relay_handoff"):
            try:
                sql = conn.statement(name).driver
            except KeyError:
                out.append(f"EXPLAIN {name}: statement not in the product yet")
                continue
            conn.execute_sql("BEGIN")
            try:
                plan = conn.execute_sql(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, _params(sql)
                )
            finally:
                conn.execute_sql("ROLLBACK")
            text = "\n".join("    " + r[0] for r in plan)
            out.append(
                f"EXPLAIN ANALYZE {name} at {store.filler:,} filler rows "
                f"(+{n:,} measured, rolled back):\n{text}"
            )
        store.reset(conn)
    finally:
        conn.close()
    return out


def plan(ctx: Ctx) -> Plan:
    big = ctx.size(1_000_000, 200_000)
    n = ctx.size(20_000, 5_000)
    print(f"  [backlog] loading {big:,} filler rows per table ...", flush=True)
    small_store, big_store = (
        Store("outbox_bench_backlog_s", 10_000),
        Store("outbox_bench_backlog_l", big),
    )
    p = Plan()
    for store, tag in ((small_store, "10k"), (big_store, f"{big // 1000}k")):
        p.cases.append(_relay_case(store, n, f"relay batch 500, {tag} rows present"))
        p.cases.append(_worker_case(store, n, f"worker c16 p100, {tag} rows present"))
    tag = f"{big // 1000}k"
    p.targets = [
        Target(
            f"relay with {tag} rows >= 0.8x with 10k",
            f"{NAME}: relay batch 500, {tag} rows present",
            [f"{NAME}: relay batch 500, 10k rows present"],
            ">=",
            0.8,
        ),
        Target(
            f"worker with {tag} rows >= 0.8x with 10k",
            f"{NAME}: worker c16 p100, {tag} rows present",
            [f"{NAME}: worker c16 p100, 10k rows present"],
            ">=",
            0.8,
        ),
    ]
    p.after.append(lambda: p.notes.extend(explain(big_store, n)))
    p.notes.append(f"backlog: {n:,} measured rows per sample on top of the filler")
    return p
