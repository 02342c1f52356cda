"""The held_xmin run's worker: ``python -m bench.w_held_xmin SAMPLES URL``.

``outbox worker bench --app bench.w_outbox:APP`` with the CLI's defaults, plus a timer
around the PostgreSQL driver's two claim calls (``job_claim``, ``job_ack_claim``: the
claim's round trip, acknowledgements riding along). Every call appends ``time,
seconds, claimed, acked`` to SAMPLES (flushed once a second), and so does every
acknowledgement sent alone (``job_ack``, with ``claimed`` -1) and every pass of the
ring's rotation (``ring_rotate``, ``claimed`` -2, ``acked`` 1 when it rotated); the
parent reads them
per minute. The timer is the only difference from a production worker.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

from outbox.db.mysql import MysqlDriver
from outbox.db.postgresql import PostgresqlDriver


class _Samples:
    """Written from the worker's loop and from the ring's ticker thread."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.flushed = time.monotonic()
        self.lock = threading.Lock()

    def add(self, seconds: float, claimed: int, acked: int) -> None:
        with self.lock:
            self.out.write(f"{time.time():.3f},{seconds:.6f},{claimed},{acked}\n")
            if time.monotonic() - self.flushed > 1.0:
                self.out.flush()
                self.flushed = time.monotonic()


ROTATE = -2  # the ``claimed`` field of a ring rotation pass's sample


def _timed(samples: _Samples, driver: Any) -> None:
    claim, ack_claim, ack = driver.job_claim, driver.job_ack_claim, driver.job_ack
    rotate = PostgresqlDriver.ring_rotate

    def ring_rotate(self: PostgresqlDriver) -> Any:
        t = time.perf_counter()
        answer = rotate(self)
        samples.add(time.perf_counter() - t, ROTATE, int(answer == "rotated"))
        return answer

    def job_claim(self: Any, c: Any) -> Any:
        t = time.perf_counter()
        got = claim(self, c)
        samples.add(time.perf_counter() - t, len(got), 0)
        return got

    def job_ack_claim(self: Any, done: Any, c: Any) -> Any:
        t = time.perf_counter()
        acked, got = ack_claim(self, done, c)
        samples.add(time.perf_counter() - t, len(got), len(acked))
        return acked, got

    def job_ack(self: Any, fence: Any) -> Any:
        t = time.perf_counter()
        acked = ack(self, fence)
        samples.add(time.perf_counter() - t, -1, len(acked))  # -1: an ack alone, no claim
        return acked

    PostgresqlDriver.ring_rotate = ring_rotate  # type: ignore[method-assign]
    driver.job_ack = job_ack
    driver.job_claim = job_claim
    driver.job_ack_claim = job_ack_claim


def main(path: str, url: str) -> None:
    from outbox.cli import main as cli

    os.environ["OUTBOX_DATABASE_URL"] = url
    every = os.environ.get("OUTBOX_BENCH_RING_EVERY_MS")  # a bench-only knob: A/B runs
    if every:
        from outbox.db import ring

        ring.EVERY_MS = int(every)
    with open(path, "a", buffering=1 << 16) as out:
        _timed(_Samples(out), PostgresqlDriver if url.startswith("postgresql") else MysqlDriver)
        sys.argv = ["outbox", "--log-level", "warning", "worker", "bench", "--app",
                    "bench.w_outbox:APP"]
        try:
            cli()
        finally:
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
