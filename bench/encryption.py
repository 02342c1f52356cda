"""Encryption at rest, on vs off, same run: ``record()`` in its own transaction and a
worker draining pushed jobs, on SQLite (a file in a temporary folder), rounds
interleaved so drift on a shared machine hits both sides alike.

    python -m bench.encryption [--jobs 2000] [--rounds 3]

Targets (issue 42): record txn <= 1.05x off, drain >= 0.9x off (throughput).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from outbox import Job, Registry, push, record, sealing
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import Worker, WorkerConfig

KEY = bytes(range(32))
PAYLOAD = {"user_id": 42, "email": "someone@example.com", "items": list(range(10))}
registry = Registry()


@registry.job("bench.enc")
def noop(payload: Any, ctx: Any) -> None:
    return None


def _database(folder: Path, name: str) -> tuple[Database, str]:
    path = folder / f"{name}.db"
    db = Database(f"sqlite:///{path}")
    with db.connect() as c:
        migrate(c)
    return db, str(path)


def _record(path: str, jobs: int, tag: str) -> float:
    """Mean seconds per record() transaction (BEGIN ... record ... COMMIT)."""
    conn = sqlite3.connect(path, isolation_level=None)
    began = time.perf_counter()
    for i in range(jobs):
        conn.execute("BEGIN")
        record(conn, f"{tag}:{i}", Job("bench.enc", {**PAYLOAD, "n": i}))
        conn.execute("COMMIT")
    spent = time.perf_counter() - began
    conn.close()
    return spent / jobs


def _drain(db: Database, path: str, jobs: int) -> float:
    """Jobs per second for one worker draining ``jobs`` pushed jobs."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for i in range(jobs):
        push(conn, Job("bench.enc", {**PAYLOAD, "n": i}))
    conn.execute("COMMIT")
    conn.close()
    began = time.perf_counter()
    with Worker(db, registry, WorkerConfig(stop_when_empty=True, sleep=0.01)) as w:
        w.run()
    return jobs / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rec: dict[str, list[float]] = {"off": [], "on": []}
    drain: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in ("off", "on"):
                sealing.configure({"k1": KEY} if side == "on" else None)
                db, path = _database(Path(tmp), f"{side}{r}")
                rec[side].append(_record(path, args.jobs, f"{side}{r}"))
                drain[side].append(_drain(db, path, args.jobs))
    sealing.reset()
    r_off, r_on = statistics.median(rec["off"]), statistics.median(rec["on"])
    d_off, d_on = statistics.median(drain["off"]), statistics.median(drain["on"])
    print(f"SQLite file, {args.jobs} jobs x {args.rounds} rounds (medians), default settings")
    print(f"{'measure':<28}{'off':>12}{'on':>12}{'on/off':>9}  target")
    ratio = r_on / r_off
    print(f"{'record() txn, us':<28}{r_off * 1e6:>12.1f}{r_on * 1e6:>12.1f}{ratio:>9.3f}  <= 1.05")
    print(f"{'worker drain, jobs/s':<28}{d_off:>12.0f}{d_on:>12.0f}{d_on / d_off:>9.3f}  >= 0.90")


if __name__ == "__main__":
    main()
