"""Workloads of the ``ordering`` scenario: drains of keyless and of ordered no-op jobs."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.data import JOB_COLUMNS, JOB_NAME, QUEUE, job_rows, load


def ordered_rows(count: int, keys: int) -> Iterator[tuple[Any, ...]]:
    """``count`` queued jobs spread over ``keys`` ordering keys, interleaved by id, as
    the relay leaves them: each key's first job in its turn, the others waiting."""
    from outbox.job import BLOCKED_OFFSET_MS

    digests = [hashlib.sha256(f"bench:{k}".encode()).hexdigest() for k in range(keys)]
    for i, row in enumerate(job_rows(0, count)):
        waiting = i >= keys
        yield (*row[:6], BLOCKED_OFFSET_MS if waiting else 0, row[7], digests[i % keys])


def load_ordered(conn: Any, count: int, keys: int, queue_suffix: str = "") -> None:
    rows = ordered_rows(count, keys)
    if queue_suffix:
        rows = ((r[0], r[1] + queue_suffix, *r[2:]) for r in rows)
    load(conn, "outbox_jobs", JOB_COLUMNS + ", ordering_key", rows)
    digests = {hashlib.sha256(f"bench:{k}".encode()).hexdigest() for k in range(keys)}
    load(conn, "outbox_ordering_keys", "key_digest", ((d,) for d in digests))


def worker(url: str, concurrency: int, prefetch: int | None) -> Callable[[], Any]:
    from outbox import Registry
    from outbox.db.connection import Database
    from outbox.queue import Worker, WorkerConfig

    reg = Registry()

    @reg.job(JOB_NAME)
    def noop(payload: Any, ctx: Any) -> None:
        return None

    config = WorkerConfig(queues={QUEUE: None}, concurrency=concurrency, prefetch=prefetch,
                          stop_when_empty=False, sleep=0.01)  # fmt: skip
    w = Worker(Database(url), reg, config)

    def work() -> dict[str, Any]:
        import threading

        thread = threading.Thread(target=w.run, daemon=True)
        thread.start()
        conn = Database(url).connect()
        left = f"SELECT count(*) FROM outbox_jobs WHERE queue = '{QUEUE}'"
        try:
            while int(conn.execute_sql(left)[0][0]):
                time.sleep(0.01)
        finally:
            conn.close()
        w.stop()
        thread.join()
        return {"count": int(w.stats.succeeded)}

    return work
