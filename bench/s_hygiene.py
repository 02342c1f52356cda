"""hygiene: 1,000,000 jobs through record → relay → worker on PostgreSQL, autovacuum on.

What a long day does to the tables: two producer processes record (20 intents a
transaction), ``outbox relay --watch`` hands them off, ``outbox worker`` runs them (CLI
defaults, a no-op handler), all at once on one database. The database is a private
PostgreSQL 15 cluster with the server's defaults (autovacuum on, fsync on), because the
shared test server runs with autovacuum off, plus the per-table settings of the
table-hygiene migration. Every 2 s the parent counts what is done (key rows recorded,
less intents and jobs still in the tables). The report gives the throughput of each
tenth of the jobs from the first one done (a table whose dead rows pile up shows a
slowing tail: target last tenth >= 0.9x the first), and at the end each table's live
and dead tuples, autovacuum runs, and table and index sizes. --quick runs 50,000.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import pairwise
from typing import Any

from bench import data
from bench.core import Case, Target
from bench.plan import Ctx, Plan
from tests.fixtures.pg_cluster import PgCluster

NAME = "hygiene"
PRODUCERS = 2
TABLES = ("outbox_keys", "outbox_messages", "outbox_jobs")


def _done(conn: Any) -> int:
    recorded = conn.execute_sql("SELECT count(*) FROM outbox_keys")[0][0]
    waiting = conn.execute_sql(
        "SELECT (SELECT count(*) FROM outbox_messages) + (SELECT count(*) FROM outbox_jobs)"
    )[0][0]
    return int(recorded) - int(waiting)


def _start(url: str, n: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "OUTBOX_DATABASE_URL": url}
    quiet = ["--log-level", "warning"]
    procs = [
        subprocess.Popen([sys.executable, "-m", "outbox", *quiet, "relay", "--watch"], env=env),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "outbox",
                *quiet,
                "worker",
                data.QUEUE,
                "--app",
                "bench.w_outbox:APP",
            ],
            env=env,
        ),
    ]
    share = n // PRODUCERS
    for p in range(PRODUCERS):
        count = share if p < PRODUCERS - 1 else n - share * (PRODUCERS - 1)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.w_hygiene", url, str(p * share), str(count)], env=env
            )
        )
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def _crossings(samples: list[tuple[float, int]], n: int) -> list[float]:
    """When done crossed each tenth of ``n`` (linear between samples)."""
    out: list[float] = []
    for k in range(1, 11):
        mark = n * k / 10
        prev = samples[0]
        for s in samples[1:]:
            if s[1] >= mark:
                t0, d0 = prev
                t1, d1 = s
                out.append(t0 + (t1 - t0) * ((mark - d0) / (d1 - d0) if d1 > d0 else 1.0))
                break
            prev = s
    return out


def _table_stats(conn: Any) -> list[str]:
    rows = conn.execute_sql(
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count, "
        "pg_size_pretty(pg_table_size(relid)), pg_size_pretty(pg_indexes_size(relid)) "
        "FROM pg_stat_user_tables WHERE relname = ANY(%(t)s) ORDER BY relname",
        {"t": list(TABLES)},
    )
    lines = [
        "table | live | n_dead_tup | autovacuums | autoanalyzes | table size | index size",
        "--- | ---: | ---: | ---: | ---: | ---: | ---:",
    ]
    lines += [" | ".join(str(v) for v in r) for r in rows]
    return lines


def run(url: str, n: int) -> tuple[list[float], list[str]]:
    """Run ``n`` jobs through; the ten decile rates (jobs/s) and the report lines."""
    conn = data.connect(url)
    autovacuum = conn.execute_sql("SHOW autovacuum")[0][0]
    load = os.getloadavg()
    procs = _start(url, n)
    started = time.monotonic()
    samples: list[tuple[float, int]] = [(0.0, 0)]
    try:
        while samples[-1][1] < n:
            time.sleep(2)
            samples.append((time.monotonic() - started, _done(conn)))
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a hygiene process failed; see its output above")
            if samples[-1][0] > 3600:
                raise RuntimeError(f"hygiene run not done after an hour: {samples[-1][1]:,}")
    finally:
        _stop(procs)
    took = samples[-1][0]
    time.sleep(1)  # the statistics collector's last flush
    # From the first job done: the processes' start-up (imports, connecting) is not a
    # property of the tables, and counting it would flatter the ratio.
    first = next(i for i, s in enumerate(samples) if s[1] > 0) - 1
    samples = [(t - samples[first][0], d - samples[first][1]) for t, d in samples[first:]]
    n -= samples[0][1]
    cross = _crossings(samples, n)
    edges = [0.0, *cross]
    rates = [(n / 10) / (b - a) if b > a else 0.0 for a, b in pairwise(edges)]
    lines = [
        f"hygiene: {n:,} jobs record → relay → worker in {took:.0f} s "
        f"({n / took:,.0f} jobs/s), autovacuum={autovacuum}, load average at start "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, at end "
        + "/".join(f"{x:.1f}" for x in os.getloadavg()),
        "jobs/s by tenth: " + ", ".join(f"{r:,.0f}" for r in rates),
        f"last tenth / first tenth: {rates[-1] / rates[0]:.2f}" if rates and rates[0] else "",
        *_table_stats(conn),
    ]
    conn.close()
    return rates, lines


class DefaultCluster(PgCluster):
    """A private cluster as PostgreSQL ships it: autovacuum on, fsync on."""

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c autovacuum=on -c fsync=on -c max_connections=60"
        )


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(1_000_000, 50_000)
    cluster = DefaultCluster()
    cluster.start()
    url = cluster.url()
    p = Plan(rounds=1)
    p.after.append(cluster.destroy)
    rates: list[float] = []

    def measure() -> float:
        got, lines = run(url, n)
        rates[:] = got
        p.notes.extend(lines)
        for line in lines:
            print(f"  [hygiene] {line}", flush=True)
        return got[-1] / got[0] if got and got[0] else 0.0

    # No warm-up run: the measured run is the whole point (a second million would be
    # recorded on top of the first), and rounds=1 for the same reason.
    label = f"last tenth / first tenth, {n // 1000}k jobs"
    p.cases.append(Case(label, measure, unit="x", warmup=lambda: None))
    p.targets.append(
        Target(
            "throughput stays flat: last 10% >= 0.9x the first 10%",
            f"{NAME}: {label}",
            None,
            ">=",
            0.9,
        )
    )
    return p
