"""The ring's rotation under a held horizon: this tree's against the two reused slots.

    python -m bench.ring_churn [--rotations 200] [--rounds 2]

ADR 5's fourth version made each rotation build a fresh slot table and drop the one it
left; the third reused two slot tables, attaching, detaching and truncating them, so
every rotation rewrote the same catalog rows (``pg_attribute``, ``pg_class``,
``pg_depend``, ``pg_inherits``), whose dead versions a held horizon keeps. This measures
what that costs the queue, both storages in the same run, in interleaved rounds:

- ``reused``: the third version's ``storage/ring.sql`` (commit ``REUSED_COMMIT``);
- ``fresh``: this tree's.

Each side gets a new database on the shared server (``outbox migrate`` on the heap, then
its ring.sql), a REPEATABLE READ transaction that read ``pg_class`` and stays open (the
hold), and then ``--rotations`` forced rotations (``outbox_ring_rotate(0, 0, ...)``),
each after 300 jobs inserted and 298 deleted. A reader thread runs a claim-shaped query
(the claim index's order, 10 rows) every 2 ms on its own connection: its latency is what
a worker's statement meets while a rotation holds the queue's lock, and as each
rotation's invalidation makes it plan again against the catalogs. Printed per 50
rotations: the pass's p50 and max, and the reader's p50, p99 and max; at the end, the
catalogs' dead versions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from bench import servers

ROOT = Path(__file__).resolve().parents[1]
REUSED_COMMIT = "78da569"  # the last commit with the two reused slots
RING_SQL = "outbox/schemas/postgresql/storage/ring.sql"
READ = ("SELECT id FROM outbox_jobs WHERE queue = 'default' AND reserved_by IS NULL"
        " ORDER BY priority, available_at, id LIMIT 10")
CHURN = (
    "INSERT INTO outbox_jobs (queue, job_name, payload, available_at, created_at, message_id)"
    " SELECT 'default', 'x', '{}', 0, 0, md5(random()::text) FROM generate_series(1, 300)",
    "DELETE FROM outbox_jobs WHERE id IN (SELECT id FROM outbox_jobs ORDER BY id LIMIT 298)",
)


def ring_sql(side: str) -> str:
    if side == "fresh":
        return (ROOT / RING_SQL).read_text(encoding="utf-8")
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{REUSED_COMMIT}:{RING_SQL}"],
                          check=True, capture_output=True, text=True).stdout


def database(side: str) -> str:
    url = servers.fresh("postgresql", f"outbox_bench_churn_{side}")
    env = {**os.environ, "OUTBOX_QUEUE_STORAGE": "heap"}
    subprocess.run([sys.executable, "-m", "outbox", "--database-url", url, "migrate"],
                   check=True, env=env, capture_output=True, cwd=ROOT)
    with psycopg.connect(url, autocommit=True) as c, c.transaction():
        c.execute(ring_sql(side).encode())
    return url


class Reader(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.lat = url, threading.Event(), [0.0]

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                c.execute(READ).fetchall()
                self.lat.append((time.perf_counter() - t) * 1000)
                time.sleep(0.002)

    def take(self) -> list[float]:
        got, self.lat = self.lat, []
        return got


def run_side(side: str, rotations: int) -> list[tuple[float, float, float, float, float]]:
    url = database(side)
    hold = psycopg.connect(url)
    hold.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    hold.execute("SELECT count(*) FROM pg_class").fetchone()
    reader = Reader(url)
    reader.start()
    rows, passes = [], []
    with psycopg.connect(url, autocommit=True) as c:
        for i in range(rotations):
            for stmt in CHURN:
                c.execute(stmt.encode())
            t = time.perf_counter()
            answer = c.execute("SELECT outbox_ring_rotate(0, 0, 5000, '50ms')").fetchone()
            passes.append((time.perf_counter() - t) * 1000)
            if answer != ("rotated",):
                print(f"{side}: pass {i} answered {answer}", file=sys.stderr)
            if (i + 1) % 50 == 0:
                lat = sorted(reader.take())
                rows.append((statistics.median(passes), max(passes), lat[len(lat) // 2],
                             lat[int(len(lat) * 0.99)], lat[-1]))
                passes = []
        dead = c.execute(
            "SELECT relname, n_dead_tup FROM pg_stat_sys_tables WHERE n_dead_tup > 500"
            " ORDER BY 2 DESC LIMIT 4").fetchall()
    reader.stop.set()
    reader.join()
    hold.close()
    print(f"{side}: catalogs' dead versions at the end: "
          + ", ".join(f"{n} {d:,}" for n, d in dead))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rotations", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sides = ["reused", "fresh"]
    print(f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    try:
        _rounds(sides, args)
    finally:
        servers.drop_all()
    print(f"load {os.getloadavg()[0]:.1f} at the end")


def _rounds(sides: list[str], args: argparse.Namespace) -> None:
    for r in range(args.rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            print(f"| round {r + 1} {side} | rotations | pass p50 | pass max | reader p50"
                  " | reader p99 | reader max |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            for n, (p50, pmax, r50, r99, rmax) in enumerate(run_side(side, args.rotations)):
                print(f"| | {(n + 1) * 50} | {p50:.1f} ms | {pmax:.1f} ms | {r50:.2f} ms"
                      f" | {r99:.2f} ms | {rmax:.1f} ms |")


if __name__ == "__main__":
    main()
