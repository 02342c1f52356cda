"""Workloads of the ``limits`` scenario: drains with and without the limits gate, and a
limited job name against its limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench.data import JOB_NAME, QUEUE

LIMITED = "bench.limited"
CONCURRENCY = 4
HANDLER_S = 0.02  # so concurrency 4 allows 200 jobs/s
RATE = 200  # per second


def registry(kind: str, starts: list[float] | None = None) -> Any:
    """``plain``: one no-op handler, no limits (the gate is never consulted).
    ``gated``: the same, plus a limited name, so every job passes the gate's check.
    ``concurrency`` / ``rate``: the limited name is the one drained."""
    from outbox import Registry

    reg = Registry()

    @reg.job(JOB_NAME)
    def noop(payload: Any, ctx: Any) -> None:
        return None

    if kind == "gated":
        reg.job(LIMITED, concurrency=1)(noop)
    elif kind == "concurrency":

        @reg.job(LIMITED, concurrency=CONCURRENCY)
        def sleeper(payload: Any, ctx: Any) -> None:
            time.sleep(HANDLER_S)

    elif kind == "rate":

        @reg.job(LIMITED, rate=f"{RATE}/s")
        def started(payload: Any, ctx: Any) -> None:
            assert starts is not None
            starts.append(time.monotonic())  # system-wide: comparable across processes

    return reg


def worker(url: str, kind: str, concurrency: int, prefetch: int | None) -> Callable[[], Any]:
    from outbox.db.connection import Database
    from outbox.queue import Worker, WorkerConfig

    starts: list[float] = []
    w = Worker(
        Database(url),
        registry(kind, starts),
        WorkerConfig(
            queues={QUEUE: None},
            concurrency=concurrency,
            prefetch=prefetch,
            stop_when_empty=kind in ("plain", "gated"),
            sleep=0.05,
        ),
    )

    def work() -> dict[str, Any]:
        if kind in ("plain", "gated"):
            result = w.run()
            return {"count": int(result.succeeded)}
        # Limited jobs wait in the queue between admissions; drain until none is left.
        thread = threading.Thread(target=w.run, daemon=True)
        thread.start()
        conn = Database(url).connect()
        try:
            while int(conn.execute_sql("SELECT count(*) FROM outbox_jobs")[0][0]):
                time.sleep(0.02)
        finally:
            conn.close()
        w.stop()
        thread.join()
        return {"count": int(w.stats.succeeded), "starts": starts}

    return work
