"""Helpers for the queue and worker tests: seeding, a test app, worker processes.

``registry`` is the app real worker processes load (``--app tests.queue_support:registry``).
Its handlers write what they ran to files under ``$OUTBOX_TEST_RUNLOG`` (one file per
process, one message id per line), so a test counts executions across processes without
any handler touching the queue tables.

Run as a script for the drain figures (not a test; no timed assertions anywhere)::

    python -m tests.queue_support bench --url postgresql://postgres@127.0.0.1/bench --rounds 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from outbox import PermanentFailure, Registry
from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.queue import Backoff, JobContext

ROOT = Path(__file__).resolve().parent.parent

registry = Registry()
FAST = Backoff(base=0.05, cap=0.2)


def _runlog(ctx: JobContext, tag: str = "") -> None:
    folder = os.environ.get("OUTBOX_TEST_RUNLOG")
    if not folder:
        return
    with open(Path(folder) / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
        f.write(f"{ctx.message_id} {ctx.attempt}{tag}\n")


@registry.job("t.noop")
def noop(payload: Any, ctx: JobContext) -> None:
    pass


@registry.job("t.async_noop")
async def async_noop(payload: Any, ctx: JobContext) -> None:
    pass


@registry.job("t.log")
def log_run(payload: Any, ctx: JobContext) -> None:
    _runlog(ctx)


@registry.job("t.slow")
def slow(payload: Any, ctx: JobContext) -> None:
    """Sleeps ``s`` seconds on the first attempt, ``s_retry`` (default 0) on later ones."""
    _runlog(ctx, " start")
    time.sleep(float(payload["s"] if ctx.attempt == 1 else payload.get("s_retry", 0)))
    _runlog(ctx, " end")


@registry.job("t.fail", max_attempts=3, backoff=FAST)
def fail(payload: Any, ctx: JobContext) -> None:
    raise RuntimeError("it broke: secret-detail")


@registry.job("t.permanent", backoff=FAST)
def permanent(payload: Any, ctx: JobContext) -> None:
    raise PermanentFailure("cannot ever work")


def seed_jobs(
    conn: Connection,
    n: int,
    *,
    job_name: str = "t.noop",
    queue: str = "default",
    payload: str = '{"n": 1}',
    delay_ms: int = 0,
) -> None:
    """Insert ``n`` ready jobs in one statement, due ``delay_ms`` from the DB's now."""
    now = int(conn.execute("now_ms")[0][0]) + delay_ms
    params = {"name": job_name, "queue": queue, "payload": payload, "now": now, "n": n}
    conn.execute_sql(_SEED[conn.dialect.name], params)


_COLS = "message_id, queue, job_name, payload, attempts, available_at, created_at"
_SEED = {
    "postgresql": (
        f"INSERT INTO outbox_jobs ({_COLS}) "
        "SELECT gen_random_uuid()::text, %(queue)s, %(name)s, %(payload)s, 0, %(now)s, %(now)s "
        "FROM generate_series(1, %(n)s)"
    ),
    "sqlite": (
        f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
        f"INSERT INTO outbox_jobs ({_COLS}) "
        "SELECT lower(hex(randomblob(16))), :queue, :name, :payload, 0, :now, :now FROM s"
    ),
    "mysql": (
        f"INSERT INTO outbox_jobs ({_COLS}) "
        "SELECT UUID(), %(queue)s, %(name)s, %(payload)s, 0, %(now)s, %(now)s "
        "FROM seq_1_to_1000000 LIMIT %(n)s"
    ),
}


def count(conn: Connection, table: str, where: str = "1=1") -> int:
    return int(conn.execute_sql(f"SELECT count(*) FROM {table} WHERE {where}")[0][0])


def runs(folder: Path) -> Counter[str]:
    """message id → how many times ``t.log`` ran it (all processes)."""
    seen: Counter[str] = Counter()
    for line in runlog_lines(folder):
        parts = line.split()  # pid, message id, attempt (t.log writes no tag)
        if len(parts) == 3:
            seen[parts[1]] += 1
    return seen


def runlog_lines(folder: Path) -> list[str]:
    """Every line the handlers wrote, as ``"<pid> <message_id> <attempt>[ start|end]"``."""
    out = []
    for f in sorted(folder.glob("*.log")):
        pid = f.stem
        out.extend(f"{pid} {line}" for line in f.read_text(encoding="utf-8").splitlines())
    return out


def worker_cmd(url: str, *args: str, queues: tuple[str, ...] = ("default",)) -> list[str]:
    return [
        sys.executable,
        "-m",
        "outbox",
        "--database-url",
        url,
        "--log-format",
        "json",
        "worker",
        *queues,
        "--app",
        "tests.queue_support:registry",
        *args,
    ]


def start_worker(url: str, runlog: Path, *args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "OUTBOX_TEST_RUNLOG": str(runlog), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        worker_cmd(url, *args, **kw),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(predicate: Any, timeout: float = 60.0, every: float = 0.05) -> None:
    """Poll ``predicate`` until true; fail the test (not time it) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(every)


# -- the drain figures (a script, not a test) -------------------------------------


def _bench(url: str, jobs: int, settings: list[tuple[int, int]], handler: str) -> None:
    from outbox.queue import Worker, WorkerConfig

    db = Database(url)
    with db.connect() as conn:
        migrate(conn)
    for concurrency, prefetch in settings:
        n = jobs if prefetch > 1 else max(1, jobs // 10)  # one round trip per job is slow
        with db.connect() as conn:
            conn.execute_sql("DELETE FROM outbox_jobs")
            if db.dialect.name == "postgresql":
                # Each run leaves ~2 dead tuples per job; with autovacuum off (as on the
                # shared test server) the claim index would be walked over all of them.
                conn.execute_sql("VACUUM ANALYZE outbox_jobs")
            seed_jobs(conn, n, job_name=handler)
        config = WorkerConfig(concurrency=concurrency, prefetch=prefetch, stop_when_empty=True)
        began, cpu = time.perf_counter(), time.process_time()
        stats = Worker(db, registry, config).run()
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
        print(
            f"{db.dialect.name:10} {handler:12} "
            f"concurrency={concurrency:<3} prefetch={prefetch:<4} "
            f"jobs={stats.succeeded:<6} {stats.succeeded / took:>8,.0f} jobs/s  "
            f"worker cpu {cpu / max(stats.succeeded, 1) * 1e6:.0f} us/job",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.queue_support")
    parser.add_argument("what", choices=["bench"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--handler", default="t.noop", choices=["t.noop", "t.async_noop"])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    settings = [(1, 1), (1, 100), (16, 1), (16, 100)]
    for _ in range(args.rounds):
        _bench(args.url, args.jobs, settings, args.handler)


if __name__ == "__main__":
    main()
