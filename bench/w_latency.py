"""Latency probes: a handler that notes when it starts, and a background load generator.

The worker runs ``--app bench.w_latency:APP``; its handler appends ``seq monotonic`` to
``$BENCH_LATENCY_FILE`` as its first act. CLOCK_MONOTONIC is system-wide on Linux, so
the producer's commit instant and the handler's start compare across processes.
``python -m bench.w_latency URL RATE`` pushes about RATE background jobs a second.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from bench.data import JOB_NAME, QUEUE, payload

PROBE = "bench.probe"
_out: list[Any] = []


def _sink() -> Any:
    if not _out:
        _out.append(open(os.environ["BENCH_LATENCY_FILE"], "a", buffering=1))  # noqa: SIM115
    return _out[0]


def _build() -> Any:
    from outbox import Registry

    reg = Registry()

    @reg.job(PROBE)
    def probe(body: Any, ctx: Any) -> None:
        _sink().write(f"{body['seq']} {time.monotonic()}\n")

    @reg.job(JOB_NAME)
    def noop(body: Any, ctx: Any) -> None:
        return None

    return reg


def __getattr__(name: str) -> Any:
    # Built on first use, so importing this module needs no worker in the product yet.
    if name == "APP":
        return _build()
    raise AttributeError(name)


def load(url: str, per_second: int) -> None:
    """Push ``per_second`` no-op jobs a second, 10 per transaction, until killed."""
    from bench.w_record import app_connect
    from outbox import Job
    from outbox.queue import push

    conn, _ = app_connect(url)
    interval = 10 / per_second
    job = Job(JOB_NAME, payload(0), queue=QUEUE)
    nxt = time.monotonic()
    while True:
        for _ in range(10):
            push(conn, job)
        conn.commit()
        nxt += interval
        pause = nxt - time.monotonic()
        if pause > 0:
            time.sleep(pause)


if __name__ == "__main__":
    load(sys.argv[1], int(sys.argv[2]))
