"""One sample of ``bench/encryption.py``, in a process of its own (run as a file, so the
``outbox`` it imports is the one first on ``PYTHONPATH``: this tree's, or the copy without
the typed-jobs hook).

    python bench/w_encryption.py record|drain off|on URL JOBS TAG

Prints one number: microseconds per ``record()`` transaction, or jobs per second for one
worker draining ``JOBS`` pushed jobs (the same payload ``bench.data.payload`` builds).
"""

from __future__ import annotations

import sys
import time
from typing import Any

KEY = bytes(range(32))
JOB = "bench.enc"


def _payload(i: int) -> dict[str, Any]:
    return {"user_id": i, "email": f"user{i}@example.com", "items": list(range(10))}


def _raw(url: str) -> Any:
    """A DB-API connection the way an application opens one, tables emptied."""
    if url.startswith("sqlite"):
        import sqlite3

        conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        begin = "BEGIN"
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        begin = "BEGIN"
    for table in ("outbox_jobs", "outbox_messages", "outbox_keys"):
        conn.execute(f"DELETE FROM {table}")
    return conn, begin


def record_us(url: str, jobs: int, tag: str) -> float:
    from outbox import Job, record

    conn, begin = _raw(url)
    began = time.perf_counter()
    for i in range(jobs):
        conn.execute(begin)
        record(conn, f"{tag}:{i}", Job(JOB, _payload(i)))
        conn.execute("COMMIT")
    spent = time.perf_counter() - began
    conn.close()
    return spent / jobs * 1e6


def drain_per_s(url: str, jobs: int) -> float:
    from outbox import Job, Registry, push
    from outbox.db.connection import Database
    from outbox.queue import Worker, WorkerConfig

    registry = Registry()
    registry.job(JOB)(_noop)
    conn, begin = _raw(url)
    conn.execute(begin)
    for i in range(jobs):
        push(conn, Job(JOB, _payload(i)))
    conn.execute("COMMIT")
    conn.close()
    began = time.perf_counter()
    with Worker(Database(url), registry, WorkerConfig(stop_when_empty=True)) as worker:
        worker.run()
    took = time.perf_counter() - began
    if worker.stats.succeeded != jobs:
        raise SystemExit(f"drained {worker.stats.succeeded} of {jobs}")
    return jobs / took


def _noop(payload: Any, ctx: Any) -> None:
    return None


def main(argv: list[str]) -> None:
    mode, side, url, jobs, tag = argv
    from outbox import sealing

    sealing.configure({"k1": KEY} if side == "on" else None)
    value = record_us(url, int(jobs), tag) if mode == "record" else drain_per_s(url, int(jobs))
    print(f"{value:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
