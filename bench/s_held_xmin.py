"""held_xmin: the queue on PostgreSQL while a long transaction holds the xmin horizon.

The incident of issue 39, reproduced: a private PostgreSQL 15 cluster with the server's
defaults (autovacuum on, fsync on); one ``outbox worker`` process with the CLI's
defaults (``bench.w_held_xmin``: a timer around its claim calls, nothing else changed);
a producer thread offering 1,000 jobs/s through ``push_many`` (100 jobs every 100 ms on
its own connection, one commit each). After one minute of steady state, a session opens
a REPEATABLE READ transaction, does one read (of ``pg_class``, not a queue table) and
leaves it open for the hold; from then on no row version deleted or updated anywhere
can be vacuumed away. Per minute: completed/s (the worker's acknowledgements), claim
latency p50/p95/p99 (the claim's round trip, acknowledgements riding along),
``n_dead_tup`` and table + index size of the queue's relations at the minute's end and
the largest size sampled every 2 s in the minute (the ring's size swings with each
rotation, so the size target compares the largest of the last minute with the largest
of the first, for both storages alike), and one claim under EXPLAIN (ANALYZE, BUFFERS),
rolled back: its time and the buffers it touched. After the run, the relations whose
dead row versions grew the most (the catalogs included) and the claim's plan, node by
node, at the first mark and the last: what a claim walks more of as the hold goes on.

Each storage runs in its own database of the same cluster, one after the other in the
same run: ``today`` (the ``outbox_jobs`` heap, ``OUTBOX_QUEUE_STORAGE=heap``) is the
comparator, ``ring`` the rotated storage of ADR 5 (the default on PostgreSQL;
docs/explanation/adr/0005-queue-ring-storage.md). ``mariadb``, asked for with
``OUTBOX_BENCH_HELD_STORAGES=today,ring,mariadb``, runs the same load on the shared
MariaDB server with a read view held open (``START TRANSACTION WITH CONSISTENT
SNAPSHOT`` and one read): InnoDB's purge waits for it as VACUUM waits for a snapshot;
its dead-version column is the server's history list length
(``trx_rseg_history_len``: undo logs not yet purged).

The hold lasts ``OUTBOX_BENCH_HELD_MINUTES`` minutes (default 10; ``--quick``: 2); a full
run is about 25 minutes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import data, servers
from bench.core import Case, Target
from bench.plan import PY, Ctx, Plan
from bench.s_hygiene import DefaultCluster
from bench.w_held_xmin import ROTATE
from bench.w_record import app_connect

NAME = "held_xmin"
RATE = 1000  # jobs/s offered
TICK_S = 0.1
STORAGES = tuple(os.environ.get("OUTBOX_BENCH_HELD_STORAGES", "today,ring").split(","))


def _minutes(ctx: Ctx) -> int:
    env = os.environ.get("OUTBOX_BENCH_HELD_MINUTES")
    if env:
        return int(env)
    return 2 if ctx.quick else 10


def prepare(storage: str, url: str) -> None:
    """A database migrated with ``OUTBOX_QUEUE_STORAGE=storage`` (today's: heap)."""
    from outbox.config import settings

    kept = settings.queue_storage
    settings.queue_storage = "ring" if storage == "ring" else "heap"
    try:
        data.connect(url).close()
    finally:
        settings.queue_storage = kept


class Producer(threading.Thread):
    """``push_many`` of 100 jobs every 100 ms, on schedule (a late tick catches up)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.pushed = 0
        self.latencies: list[tuple[float, float]] = []  # (time, seconds) per push_many

    def run(self) -> None:
        from outbox import Job, push_many

        per_tick = int(RATE * TICK_S)
        conn, _ = app_connect(self.url)
        try:
            due = time.monotonic()
            while not self.stop.is_set():
                jobs = [Job(data.JOB_NAME, data.payload(self.pushed + i), queue=data.QUEUE)
                        for i in range(per_tick)]
                t = time.perf_counter()
                push_many(conn, jobs)
                conn.commit()
                self.latencies.append((time.time(), time.perf_counter() - t))
                self.pushed += per_tick
                due += TICK_S
                pause = due - time.monotonic()
                if pause > 0:
                    self.stop.wait(pause)
        finally:
            conn.close()


MARIADB = "mariadb"


class _Side:
    """What ``run`` needs of a backend: a migrated database, its queue relations' size
    and dead versions, and a long transaction holding its snapshot."""

    url: str
    stats: Any  # the connection ``relations`` reads through
    held: Any  # the long transaction's connection, while it holds

    def relations(self) -> tuple[int, int, int]:
        """Bytes, dead row versions (PostgreSQL's ``n_dead_tup``; InnoDB's history
        list, the undo purge has not caught up with), live rows."""
        raise NotImplementedError

    def hold(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        if self.held is not None:
            self.held.close()

    def close(self) -> None:
        self.stats.close()


class _PostgreSQL(_Side):
    """A database of the private cluster: ``today`` the heap, ``ring`` the ring."""

    def __init__(self, cluster: DefaultCluster, db: str, storage: str) -> None:
        admin = psycopg.connect(cluster.url(), autocommit=True)
        admin.execute(f"DROP DATABASE IF EXISTS {db}")
        admin.execute(f"CREATE DATABASE {db}")
        admin.close()
        self.url = cluster.url(db)
        prepare(storage, self.url)
        self.stats = psycopg.connect(self.url, autocommit=True)
        self.held: psycopg.Connection[Any] | None = None

    def relations(self) -> tuple[int, int, int]:
        size, dead, live = self.stats.execute(_relations_sql()).fetchone()  # type: ignore[misc]
        return int(size), int(dead), int(live)

    def hold(self) -> None:
        """REPEATABLE READ, one read of something else than the queue, left open."""
        self.held = psycopg.connect(self.url)
        self.held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.held.execute("SELECT count(*) FROM pg_class").fetchone()


class _MariaDB(_Side):
    """A database of the shared MariaDB server (its settings as the machine has them):
    the read view of ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, left open, stops
    InnoDB's purge, as a REPEATABLE READ snapshot stops VACUUM."""

    def __init__(self, db: str) -> None:
        self.url = servers.fresh("mariadb", db)
        data.connect(self.url).close()
        self.stats, _ = app_connect(self.url)
        self.stats.autocommit(True)
        self.held: Any = None

    def relations(self) -> tuple[int, int, int]:
        with self.stats.cursor() as cur:
            cur.execute("SELECT coalesce(sum(data_length + index_length), 0) FROM"
                        " information_schema.tables WHERE table_schema = DATABASE()"
                        " AND table_name = 'outbox_jobs'")
            size = int(cur.fetchone()[0])
            cur.execute("SELECT count FROM information_schema.innodb_metrics"
                        " WHERE name = 'trx_rseg_history_len'")
            history = int(cur.fetchone()[0])
            cur.execute("SELECT count(*) FROM outbox_jobs")
            live = int(cur.fetchone()[0])
        return size, history, live

    def hold(self) -> None:
        self.held, _ = app_connect(self.url)
        with self.held.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SELECT count(*) FROM outbox_paused_queues")
            cur.fetchall()


class _Sampler(threading.Thread):
    """The queue relations' size every ``EVERY_S`` seconds on its own connection: the
    ring's size swings with each rotation (a slot fills for a few seconds, then it is
    dropped), so an instant says where in the cycle it fell; the largest sample of a
    minute is compared with the largest of another, for either storage."""

    EVERY_S = 2.0

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.sizes: list[tuple[float, int]] = []

    def run(self) -> None:
        conn = psycopg.connect(self.url, autocommit=True)
        try:
            while not self.stop.wait(self.EVERY_S):
                size, _, _ = conn.execute(_relations_sql()).fetchone()  # type: ignore[misc]
                self.sizes.append((time.time(), int(size)))
        finally:
            conn.close()

    def largest(self, a: float, b: float) -> int:
        return max((n for t, n in self.sizes if a <= t < b), default=0)


class _Done(Exception):
    """No hold: the steady window is measured, the run ends."""


def _relations_sql() -> str:
    """The queue's relations: ``outbox_jobs``, its partition and the ring's slot that the
    last rotation left (detached, dropped by the next pass: its file counts till then)."""
    return (
        "SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0),"
        " coalesce(sum(s.n_dead_tup), 0), coalesce(sum(s.n_live_tup), 0)"
        " FROM (SELECT relid FROM pg_partition_tree('outbox_jobs')"
        "       UNION SELECT CAST('outbox_jobs' AS regclass)"
        "       UNION SELECT oid FROM pg_class WHERE relkind = 'r'"
        "         AND relname ~ '^outbox_jobs_ring_[0-9]+$') AS t"
        " LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid"
    )


# The relations whose dead row versions a hold piles up, every table of the database
# and the catalogs (a rotation rewrites catalog rows): the profile's columns.
_DEAD_SQL = (
    "SELECT s.schemaname || '.' || s.relname, s.n_dead_tup FROM pg_stat_all_tables s"
    " WHERE s.schemaname IN ('public', 'pg_catalog') AND s.n_dead_tup > 0"
)


def _claim_explain(url: str) -> tuple[float, int, list[str]]:
    """One claim (the worker's statement, ``job_claim``), run under EXPLAIN (ANALYZE,
    BUFFERS) and rolled back: its execution time (ms), the shared buffers it touched,
    and each node's share (the profile of what a claim reads)."""
    import json

    from outbox.db.connection import Database

    params = {"queue": data.QUEUE, "limit": 10, "worker": "w:probe", "lease_ms": 30_000}
    conn = Database(url).connect()
    try:
        sql = conn.statement("job_claim").driver
        raw = conn.raw
        raw.execute("BEGIN")
        try:
            (row,) = raw.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", conn.adapt(params)
            ).fetchall()
        finally:
            raw.execute("ROLLBACK")
    finally:
        conn.close()
    top = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        where = " ".join(str(node[k]) for k in ("Relation Name", "Index Name") if k in node)
        touched = int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))
        nodes.append(f"{node['Node Type']} {where}".strip() + f" buffers={touched}")
        for child in node.get("Plans", []):
            walk(child)

    walk(top["Plan"])
    plan = top["Plan"]
    buffers = int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
    return float(top["Execution Time"]), buffers, nodes


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(
    storage: str,
    cluster: DefaultCluster,
    hold_minutes: int,
    *,
    before_s: float = 60.0,
    db: str = "",
) -> tuple[dict[str, float], list[str]]:
    """One storage through the scenario; its figures and its per-minute report lines.
    With ``hold_minutes=0`` only the ``before_s`` window before a hold is measured (no
    snapshot is ever held): the storages' steady-state costs (``bench.s_ring_costs``)."""
    db = db or f"held_{storage}"
    side: _Side = _MariaDB(db) if storage == MARIADB else _PostgreSQL(cluster, db, storage)
    url = side.url
    samples_path = Path(cluster.root) / f"{db}.samples"
    samples_path.unlink(missing_ok=True)  # an earlier run's samples of this database
    worker = subprocess.Popen([PY, "-m", "bench.w_held_xmin", str(samples_path), url])
    producer = Producer(url)
    sampler = _Sampler(url) if isinstance(side, _PostgreSQL) else None
    held = False
    marks: list[tuple[float, int, int, int]] = []  # (time, bytes, n_dead_tup, n_live_tup)
    # per mark, on PostgreSQL: every relation's n_dead_tup, and a claim's EXPLAIN
    dead_by_rel: list[dict[str, int]] = []
    explains: list[tuple[float, int, list[str]]] = []

    def mark() -> None:
        marks.append((time.time(), *side.relations()))
        if isinstance(side, _PostgreSQL):
            dead_by_rel.append({str(r): int(n) for r, n in side.stats.execute(_DEAD_SQL)})
            explains.append(_claim_explain(url))

    try:
        time.sleep(3)  # the worker's imports and connection
        producer.start()
        if sampler is not None:
            sampler.start()
        time.sleep(20)  # warm: caches, the worker's prefetch settles
        before = time.time()
        time.sleep(before_s)
        mark()
        if not hold_minutes:
            raise _Done
        side.hold()
        held = True
        held_from = time.time()
        for _ in range(hold_minutes):
            time.sleep(60)
            mark()
            if worker.poll() is not None:
                raise RuntimeError(f"the held_xmin worker exited ({worker.returncode})")
    except _Done:
        held_from = time.time()
    finally:
        producer.stop.set()
        producer.join(timeout=30)
        if sampler is not None:
            sampler.stop.set()
            sampler.join(timeout=30)
        if held:
            side.release()
        worker.terminate()
        try:
            worker.wait(timeout=60)
        except Exception:
            worker.kill()
    side.close()
    rows = [line.split(",") for line in samples_path.read_text().splitlines() if line]
    calls = [(float(t), float(s), int(c), int(a)) for t, s, c, a in rows if int(c) != ROTATE]
    rotations = [float(s) * 1000 for t, s, c, _ in rows
                 if int(c) == ROTATE and float(t) >= before]
    rotated = sum(1 for t, _, c, a in rows if int(c) == ROTATE and float(t) >= before and int(a))
    keep = os.environ.get("OUTBOX_BENCH_HELD_KEEP")  # a folder to keep the samples in
    if keep:
        Path(keep, samples_path.name).write_text(samples_path.read_text())
    edges = [before, held_from] + [held_from + 60 * (m + 1) for m in range(hold_minutes)]
    labels = ["before"] + [f"hold {m + 1}" for m in range(hold_minutes)]
    lines = [
        f"{storage}: minute | completed/s | claim p50 ms | p95 ms | p99 ms | claims |"
        f" {'history list' if storage == MARIADB else 'n_dead_tup'} | live |"
        " table+index MB | largest MB | push_many p50 ms | probe claim ms | buffers",
        "--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---:",
    ]
    per: list[dict[str, float]] = []
    for i, label in enumerate(labels):
        a, b = edges[i], edges[i + 1]
        inside = [c for c in calls if a <= c[0] < b]
        claims = [c[1] * 1000 for c in inside if c[2] >= 0]
        pushes = [s * 1000 for t, s in producer.latencies if a <= t < b]
        _, size, dead, live = marks[i]
        # the largest size sampled in the minute (every 2 s): the ring's size swings with
        # each rotation, the heap's only grows; MariaDB: the minute's end (no sampler)
        largest = sampler.largest(a, b) if sampler is not None else size
        probe_ms, buffers, _nodes = explains[i] if explains else (float("nan"), 0, [])
        fig = {
            "completed/s": sum(c[3] for c in inside) / (b - a),
            "p50": _pct(claims, 0.5), "p95": _pct(claims, 0.95), "p99": _pct(claims, 0.99),
            "claims": float(len(claims)), "dead": float(dead), "live": float(live),
            "mb": size / 2**20, "largest mb": max(largest, size) / 2**20,
            "push": statistics.median(pushes) if pushes else float("nan"),
        }
        per.append(fig)
        lines.append(
            f"{label} | {fig['completed/s']:,.0f} | {fig['p50']:.2f} | {fig['p95']:.2f} |"
            f" {fig['p99']:.2f} | {len(claims):,} | {dead:,} | {live:,} | {fig['mb']:.1f} |"
            f" {fig['largest mb']:.1f} | {fig['push']:.2f} | {probe_ms:.2f} | {buffers:,}"
        )
    lines.append(
        f"{storage}: 'table+index MB' is the size at the minute's end; 'largest MB' the"
        f" largest of the samples taken every {_Sampler.EVERY_S:.0f} s in the minute (the"
        " size target compares those); 'probe claim ms' and 'buffers' one claim of 10"
        " under EXPLAIN (ANALYZE, BUFFERS), rolled back, at the minute's end"
    )
    if dead_by_rel:
        grown = sorted(dead_by_rel[-1], key=lambda r: dead_by_rel[-1][r], reverse=True)[:10]
        lines.append(
            f"{storage}: n_dead_tup by relation, before the hold -> last mark: "
            + ", ".join(f"{r} {dead_by_rel[0].get(r, 0):,} -> {dead_by_rel[-1][r]:,}"
                        for r in grown)
        )
        lines.append(f"{storage}: the claim's plan, first mark: " + "; ".join(explains[0][2]))
        lines.append(f"{storage}: the claim's plan, last mark: " + "; ".join(explains[-1][2]))
    lines.append(
        f"{storage}: rotation checks {len(rotations):,} ({rotated:,} rotated),"
        f" p50 {_pct(rotations, 0.5):.2f} ms, p95 {_pct(rotations, 0.95):.2f} ms,"
        f" max {max(rotations, default=0.0):.2f} ms"
        " (the worker's ring thread: not in the claim figures)"
    )
    for line in lines:
        print(f"  [{NAME}] {line}", flush=True)
    if not hold_minutes:
        return per[0], lines
    hold_rows = per[1:]
    figures = {
        "min completed/s during hold / offered": min(r["completed/s"] for r in hold_rows) / RATE,
        "claim p95 last hold minute / minute before": hold_rows[-1]["p95"] / per[0]["p95"],
        "size after hold / after 1 min of hold": (
            hold_rows[-1]["largest mb"] / hold_rows[0]["largest mb"]
        ),
        "claim p95 before hold ms": per[0]["p95"],
        "claim p95 last hold minute ms": hold_rows[-1]["p95"],
        "push_many p50 ms": statistics.median(s * 1000 for _, s in producer.latencies),
    }
    return figures, lines


def plan(ctx: Ctx) -> Plan:
    minutes = _minutes(ctx)
    cluster = DefaultCluster()
    cluster.start()
    p = Plan(rounds=1)
    p.after.append(cluster.destroy)
    setting = f"{minutes} min hold, {RATE}/s offered, 1 worker (defaults), autovacuum on"
    ratios = {
        "min completed/s during hold / offered": ("x", True),
        "claim p95 last hold minute / minute before": ("x", False),
        "size after hold / after 1 min of hold": ("x", False),
        "claim p95 before hold ms": ("ms", False),
        "claim p95 last hold minute ms": ("ms", False),
        "push_many p50 ms": ("ms", False),
    }
    for storage in STORAGES:
        def measure(storage: str = storage) -> dict[str, float]:
            figures, lines = run(storage, cluster, minutes)
            p.notes.extend(lines)
            return figures

        label = f"{storage}, {setting}"
        p.cases.append(Case(label, measure, unit="x", warmup=lambda: None, metrics=ratios))
    ring = f"{NAME}: ring, {setting}"
    today = f"{NAME}: today, {setting}"
    p.targets += [
        Target("completed/s every hold minute >= 0.98x offered",
               f"{ring} min completed/s during hold / offered", None, ">=", 0.98),
        Target("claim p95, last hold minute vs the minute before <= 2x",
               f"{ring} claim p95 last hold minute / minute before", None, "<=", 2.0),
        Target("queue relations' size after the hold vs after 1 minute <= 1.5x",
               f"{ring} size after hold / after 1 min of hold", None, "<=", 1.5),
        Target("push_many p50, ring vs today (<= 1.1x)", f"{ring} push_many p50 ms",
               [f"{today} push_many p50 ms"], "<=", 1.1),
    ]
    return p
