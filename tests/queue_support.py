"""Helpers for the queue and worker tests: seeding, a test app, worker processes.

``registry`` is the app real worker processes load (``--app tests.queue_support:registry``).
Its handlers write what they ran to files under ``$OUTBOX_TEST_RUNLOG`` (one file per
process, one message id per line), so a test counts executions across processes without
any handler touching the queue tables. (The drain figures live in ``bench/``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from outbox import PermanentFailure, Registry
from outbox.db.connection import Connection
from outbox.queue import Backoff, JobContext
from tests.fixtures.factories import count_rows as count  # noqa: F401 - part of this module's vocabulary
from tests.fixtures.processes import wait_until  # noqa: F401 - part of this module's vocabulary

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
