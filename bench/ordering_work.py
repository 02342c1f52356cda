"""The server's work per job of the ordering drains: figures a loaded machine leaves alone.

    python -m bench.ordering_work [--jobs 20000] [--rounds 2]

The ``ordering`` scenario's drain pair (keyless no-op jobs against the same number over
1,000 ordering keys, one ``outbox`` worker, concurrency 16, prefetch 100) on PostgreSQL,
with what the server did for each job beside its rate: buffers read (``blks_hit`` +
``blks_read`` of the bench's own database) and WAL records written (``pg_stat_wal``, the
whole cluster's: run it when nothing else writes). Jobs/s on a shared 2-core machine
swing with the load; these two depend on the statements and the schema only, so they
show what a change to either does to the ordered path when the rate cannot (issue 41:
an ordered drain is bound by the server, a keyless one by the worker's CPU). The loading
of the queue is outside the counts: only the drain is.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import psycopg

from bench import data, servers
from bench.s_ordering import _drain, _reset
from bench.w_ordering import load_ordered

KEYS = 1_000


def _counts(url: str) -> tuple[int, int]:
    """Buffers read by the bench's database and WAL records of the cluster, so far."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT blks_hit + blks_read FROM pg_stat_database"
                        " WHERE datname = current_database()").fetchone()
        wal = c.execute("SELECT wal_records FROM pg_stat_wal").fetchone()
    assert row is not None and wal is not None
    return int(row[0]), int(wal[0])


def one(url: str, jobs: int, keys: int) -> dict[str, Any]:
    conn = _reset(url)
    if keys:
        load_ordered(conn, jobs, keys)
    else:
        data.load_jobs(conn, jobs)
    data.analyze(conn)
    conn.close()
    blks0, wal0 = _counts(url)
    rate = _drain(url)
    time.sleep(1.0)  # the worker's backends write their counts as they exit
    blks1, wal1 = _counts(url)
    return {"rate": rate, "blks": (blks1 - blks0) / jobs, "wal": (wal1 - wal0) / jobs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ordering_work")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    url = servers.fresh("postgresql", "outbox_bench_ordering_work")
    one(url, args.jobs // 4, 0)  # warm-up, uncounted: the schema, the worker's start
    print(f"{args.jobs:,} no-op jobs a drain, 1 worker c16 p100, PostgreSQL"
          f" ({servers.PG_URL.rsplit('@', 1)[-1]})")
    print("round | keyless jobs/s | buffers/job | WAL rec/job"
          f" | {KEYS:,} keys jobs/s | buffers/job | WAL rec/job | load")
    for r in range(1, args.rounds + 1):
        a, b = one(url, args.jobs, 0), one(url, args.jobs, KEYS)
        print(f"{r} | {a['rate']:,.0f} | {a['blks']:.1f} | {a['wal']:.1f}"
              f" | {b['rate']:,.0f} | {b['blks']:.1f} | {b['wal']:.1f}"
              f" | {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
