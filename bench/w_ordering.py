"""Workloads of the ``ordering`` scenario: drains of keyless and of ordered no-op jobs, and
the intents its relay cases hand off (the relays and JetStream workers are ``bench.w_nats``')."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.data import (
    CREATED_AT,
    INTENT_COLUMNS,
    JOB_COLUMNS,
    JOB_NAME,
    KEY_COLUMNS,
    QUEUE,
    job_rows,
    key_rows,
    load,
    payload,
)


def ordered_rows(count: int, keys: int) -> Iterator[tuple[Any, ...]]:
    """``count`` queued jobs spread over ``keys`` ordering keys, interleaved by id, as
    the relay leaves them: each key's first job in its turn, the others waiting."""
    from outbox.job import BLOCKED_OFFSET_MS

    digests = [hashlib.sha256(f"bench:{k}".encode()).hexdigest() for k in range(keys)]
    for i, row in enumerate(job_rows(0, count)):
        waiting = i >= keys
        yield (*row[:6], BLOCKED_OFFSET_MS if waiting else 0, row[7], digests[i % keys])


def ordered_intents(count: int, keys: int) -> list[tuple[Any, ...]]:
    """``count`` pending intents (``bench.data.intent_rows``' columns, then the ordering
    key's digest) spread over ``keys`` ordering keys in turn, built as ``record()`` builds
    them (the key is part of the fingerprint the relay verifies); ``keys`` 0: none."""
    from outbox.job import Job
    from outbox.record import Intent

    rows = []
    for i in range(count):
        key = f"bench:{i % keys}" if keys else None
        job = Job(JOB_NAME, payload(i), queue=QUEUE, ordering_key=key)
        it = Intent.build(f"bench:ordering:{i}", job, 0)
        rows.append((it.message_id, it.key_digest, it.fingerprint, it.job_name, it.queue,
                     it.payload, it.max_attempts, it.available_at, "pending", CREATED_AT, 1,
                     it.ordering_key))
    return rows


def load_intents(conn: Any, rows: list[tuple[Any, ...]]) -> None:
    """``ordered_intents`` rows into ``outbox_messages`` with their key rows."""
    load(conn, "outbox_keys", KEY_COLUMNS, key_rows(rows))
    load(conn, "outbox_messages", INTENT_COLUMNS + ", ordering_key", iter(rows))


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

        conn = Database(url).connect()
        left = f"SELECT count(*) FROM outbox_jobs WHERE queue = '{QUEUE}'"
        try:
            queued = int(conn.execute_sql(left)[0][0])
            thread = threading.Thread(target=w.run, daemon=True)
            thread.start()
            # The worker's own count says when it is done: a count(*) of the queue every
            # 10 ms took a quarter of the server's CPU in the ordered drain (longer, over
            # a longer table), beside the worker it measures.
            while w.stats.succeeded < queued and thread.is_alive():
                time.sleep(0.01)
            w.stop()
            thread.join()
            still = int(conn.execute_sql(left)[0][0])
        finally:
            conn.close()
        if still:
            raise RuntimeError(f"the drain ended with {still} of {queued} jobs left")
        return {"count": int(w.stats.succeeded)}

    return work
