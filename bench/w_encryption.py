"""One sample of ``bench/encryption.py``, in a process of its own (run as a file, so the
``outbox`` it imports is the one first on ``PYTHONPATH``: this tree's, or the copy without
the typed-jobs hook).

    python bench/w_encryption.py record|drain|normalise off|on URL JOBS TAG

Prints two numbers: wall-clock microseconds per ``record()`` transaction (or jobs per
second for one worker draining ``JOBS`` pushed jobs), and this process's CPU
microseconds per transaction (or per job), every thread counted. On a shared, loaded
machine the CPU figure is the steadier one: it does not count time spent waiting for a
core, though SQLite's work (in this process) is in it and a server's is not.
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


def record_us(url: str, jobs: int, tag: str) -> tuple[float, float]:
    from outbox import Job, record

    conn, begin = _raw(url)
    began, cpu = time.perf_counter(), time.process_time()
    for i in range(jobs):
        conn.execute(begin)
        record(conn, f"{tag}:{i}", Job(JOB, _payload(i)))
        conn.execute("COMMIT")
    spent, cpu = time.perf_counter() - began, time.process_time() - cpu
    conn.close()
    return spent / jobs * 1e6, cpu / jobs * 1e6


def drain_per_s(url: str, jobs: int) -> tuple[float, float]:
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
    began, cpu = time.perf_counter(), time.process_time()
    with Worker(Database(url), registry, WorkerConfig(stop_when_empty=True)) as worker:
        worker.run()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    if worker.stats.succeeded != jobs:
        raise SystemExit(f"drained {worker.stats.succeeded} of {jobs}")
    return jobs / took, cpu / jobs * 1e6


def normalise_us(jobs: int) -> tuple[float, float]:
    """``outbox.job.normalise`` of an untyped job, no database: the producer's own code,
    where the typed-jobs hook sits (best of 7 repeats of ``jobs`` calls)."""
    import timeit

    from outbox import Job
    from outbox.job import normalise

    job = Job(JOB, _payload(1))
    best = min(timeit.repeat(lambda: normalise(job), number=jobs, repeat=7)) / jobs * 1e6
    return best, best


def _noop(payload: Any, ctx: Any) -> None:
    return None


def main(argv: list[str]) -> None:
    mode, side, url, jobs, tag = argv
    from outbox.job import sealing

    sealing.configure({"k1": KEY} if side == "on" else None)
    if mode == "normalise":
        wall, cpu = normalise_us(int(jobs))
    elif mode == "record":
        wall, cpu = record_us(url, int(jobs), tag)
    else:
        wall, cpu = drain_per_s(url, int(jobs))
    print(f"{wall:.3f} {cpu:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
