"""dashboard: how long each page takes to answer with 1,000,000 jobs present.

The database carries what a busy installation does: a million jobs over four queues
(two thirds due, a third delayed, one in a hundred held by a worker), a million intents'
key rows recorded over the last two hours (half of them inside the chart's hour), of
which a thousand are pending and a hundred quarantined (the rest handed off), and a
thousand dead letters. A real
``outbox dashboard`` process serves it; each request waits out the overview's cache
first (1 s at ``--refresh 1``), so every figure includes reading the counts from the
database, as a lone viewer's refresh does. Milliseconds per answer, over HTTP.
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import time

from bench import data, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan

NAME = "dashboard"
BOUND_MS = 300.0
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01
CACHE_S = 1.05  # just past the overview's cache at --refresh 1

FILL_JOBS = """
INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts, available_at,
                         created_at, reserved_by, reserved_at, lease_expires_at)
SELECT gen_random_uuid()::text, (ARRAY['bench','mail','search','billing'])[i %% 4 + 1],
       CASE WHEN i %% 7 = 0 THEN 'bench.rare' ELSE 'bench.noop' END, '{"filler":true}', 0,
       CASE WHEN i %% 3 = 0 THEN %(future)s ELSE %(now)s - i END, %(now)s - i,
       CASE WHEN i %% 100 = 1 THEN 'bench-worker' END,
       CASE WHEN i %% 100 = 1 THEN %(now)s END,
       CASE WHEN i %% 100 = 1 THEN %(now)s + 60000 + i END
FROM generate_series(1, %(n)s) AS i
"""
# Schema 2: every intent has a key row (its created_at is what the chart counts); only
# pending and quarantined intents keep a row in outbox_messages. Key i belongs to intent i.
FILL_KEYS = """
INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at)
SELECT encode(sha256(('dash' || i)::bytea), 'hex'), md5('dash' || i)::uuid::text,
       repeat('0', 64), %(now)s - i * 7200000::bigint / %(n)s
FROM generate_series(1, %(n)s) AS i
"""
FILL_MESSAGES = """
INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue, payload,
                             state, created_at, failed_at, failure_reason, keyed)
SELECT md5('dash' || i)::uuid::text, encode(sha256(('dash' || i)::bytea), 'hex'),
       repeat('0', 64), 'bench.noop', 'bench', '{}',
       CASE WHEN i <= %(pending)s THEN 'pending' ELSE 'failed' END,
       %(now)s - i * 7200000::bigint / %(n)s,
       CASE WHEN i > %(pending)s THEN %(now)s END,
       CASE WHEN i > %(pending)s THEN 'fingerprint_mismatch' END, 1
FROM generate_series(1, %(pending)s + %(failed)s) AS i
"""
FILL_DEAD = """
INSERT INTO outbox_failed_jobs (message_id, queue, job_name, payload, attempts, max_attempts,
                                exception_class, exception_message, failed_at)
SELECT gen_random_uuid()::text, 'mail', 'bench.noop', '{}', 3, 3, 'TimeoutError', 'slow',
       %(now)s - i * 3000
FROM generate_series(1, %(n)s) AS i
"""


class Site:
    """The filled database and a dashboard process serving it."""

    def __init__(self, jobs: int) -> None:
        self.url = servers.fresh("postgresql", "outbox_bench_dashboard")
        conn = data.connect(self.url)
        now = int(conn.execute_sql("SELECT (extract(epoch FROM now()) * 1000)::bigint")[0][0])
        self.now = now
        conn.execute_sql(FILL_JOBS, {"n": jobs, "now": now, "future": FAR_FUTURE_MS})
        conn.execute_sql(FILL_KEYS, {"n": jobs, "now": now})
        conn.execute_sql(FILL_MESSAGES, {"n": jobs, "now": now, "pending": 1000, "failed": 100})
        conn.execute_sql(FILL_DEAD, {"n": 1000, "now": now})
        for table in ("outbox_jobs", "outbox_keys", "outbox_messages", "outbox_failed_jobs"):
            conn.execute_sql(f"VACUUM ANALYZE {table}")
        self.job_id = str(conn.execute_sql(
            "SELECT message_id FROM outbox_jobs WHERE queue = 'bench' ORDER BY id DESC LIMIT 1"
        )[0][0])
        conn.close()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        env = {**os.environ, "OUTBOX_DASHBOARD_TOKEN": ""}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "outbox", "--database-url", self.url, "dashboard",
             "--bind", f"127.0.0.1:{self.port}", "--refresh", "1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.get("/api/status")
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the dashboard did not start")

    def get(self, path: str) -> tuple[int, float]:
        """(status, milliseconds) for one GET on a fresh connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            started = time.perf_counter()
            conn.request("GET", path, headers={"Accept": "text/html"})
            res = conn.getresponse()
            res.read()
            return res.status, (time.perf_counter() - started) * 1000
        finally:
            conn.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def pages(site: Site) -> dict[str, str]:
    return {
        "overview": "/",
        "live update": "/live",
        "status json": "/api/status",
        "queue ready": "/queues/bench?state=ready",
        "queue ready, a page deep in": f"/queues/bench?state=ready&after={site.now - 400_000}.0",
        "queue delayed": "/queues/bench?state=delayed",
        "queue reserved": "/queues/bench?state=reserved",
        "queue filtered by job name": "/queues/bench?state=ready&job=bench.rare",
        "job": f"/jobs/{site.job_id}",
        "dead letters": "/dead-letters",
        "quarantined": "/quarantined",
    }


def _case(site: Site, label: str, path: str) -> Case:
    def measure() -> float:
        times = []
        for _ in range(3):
            time.sleep(CACHE_S)
            status, ms = site.get(path)
            if status != 200:
                raise RuntimeError(f"{path} answered {status}")
            times.append(ms)
        return statistics.median(times)

    return Case(label, measure, unit="ms", higher_is_better=False)


def _chart_case(site: Site, tag: str) -> Case:
    """The chart's own read, which no page waits for (it refreshes in the background)."""

    def measure() -> float:
        from outbox.dashboard import store

        conn = data.connect(site.url, migrate=False)
        try:
            started = time.perf_counter()
            store.throughput(conn)
            return (time.perf_counter() - started) * 1000
        finally:
            conn.close()

    return Case(f"chart read in the background, {tag} keys", measure, unit="ms",
                higher_is_better=False)


def plan(ctx: Ctx) -> Plan:
    jobs = ctx.size(1_000_000, 200_000)
    print(f"  [dashboard] loading {jobs:,} jobs and {jobs:,} intent keys ...", flush=True)
    site = Site(jobs)
    p = Plan()
    tag = f"{jobs // 1000}k" if jobs < 1_000_000 else "1M"
    for label, path in pages(site).items():
        p.cases.append(_case(site, f"{label}, {tag} jobs", path))
    p.targets = [
        Target(f"{c.name} <= {BOUND_MS:.0f} ms", f"{NAME}: {c.name}", None, "<=", BOUND_MS)
        for c in p.cases
    ]
    p.cases.append(_chart_case(site, tag))
    p.notes.append(
        f"dashboard: {jobs:,} jobs, {jobs:,} intent keys (schema 2), 1,000 dead letters; "
        "each figure is the median of 3 GETs, each after the overview cache expired"
    )
    p.after.append(site.stop)
    return p


