"""pipeline workloads: timed producers, and handlers that note when each job starts.

Every job's payload carries a ``seq`` ("producer:n"). A producer notes ``seq`` and
``time.time()`` right after its commit returns; the handler notes ``seq`` and
``time.time()`` as its first act. Both clocks are the same machine's wall clock, so
commit → handler start is a difference of two readings of one clock; the parent joins
the two logs. Our handler also notes the job's ``enqueued_at`` (the relay's handoff,
written by PostgreSQL's clock on the same machine, millisecond resolution), which splits
a miss into the relay's leg and the worker's. Handlers write to ``$BENCH_PIPELINE_LOG``
(buffered, closed at exit).

``python -m bench.w_pipeline pgqueuer URL`` runs pgqueuer's consumer with its defaults
until SIGTERM (the outbox side runs the ``outbox`` CLI itself).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from bench.data import JOB_NAME, QUEUE, payload

BUSINESS = (
    "INSERT INTO bench_business (note_id, title, updated_at) "
    "VALUES ({a}, {b}, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
)
_out: list[Any] = []


def note_start(seq: str, queued: float | None = None) -> None:
    """The handler's first act: ``seq``, the wall clock and, when known, when the job
    entered the queue (the relay's handoff, by the database's clock), to the log."""
    now = time.time()
    if not _out:
        _out.append(open(os.environ["BENCH_PIPELINE_LOG"], "a"))  # noqa: SIM115
        atexit.register(_out[0].close)
    _out[0].write(f"{seq} {now}\n" if queued is None else f"{seq} {now} {queued}\n")


def _body(seq: str, i: int) -> dict[str, Any]:
    return {**payload(i), "seq": seq}


def _write(path: str, notes: list[tuple[str, float]]) -> None:
    Path(path).write_text("".join(f"{s} {t}\n" for s, t in notes))


def producer(url: str, k: int, seconds: float, log: str) -> Callable[[], dict[str, Any]]:
    """Business row + ``record()`` + commit, one intent per transaction, for ``seconds``."""
    from bench.w_record import app_connect
    from outbox import Job, record

    conn, _ = app_connect(url)
    business = BUSINESS.format(a="%s", b="%s")

    def work() -> dict[str, Any]:
        notes: list[tuple[str, float]] = []
        cur = conn.cursor()
        w0 = time.time()
        end, i = w0 + seconds, 0
        while time.time() < end:
            seq = f"{k}:{i}"
            cur.execute(business, (i, f"note {i}"))
            record(conn, f"pipeline:{seq}", Job(JOB_NAME, _body(seq, i), queue=QUEUE))
            conn.commit()
            notes.append((seq, time.time()))
            i += 1
        w1 = time.time()
        conn.close()
        _write(log, notes)
        return {"count": i, "w0": w0, "w1": w1}

    return work


async def pgqueuer_producer(
    url: str, k: int, seconds: float, log: str
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The same transaction through pgqueuer: business row + ``enqueue`` of one job."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    q = Queries(AsyncpgDriver(conn))
    business = BUSINESS.format(a="$1", b="$2")

    async def work() -> dict[str, Any]:
        notes: list[tuple[str, float]] = []
        w0 = time.time()
        end, i = w0 + seconds, 0
        while time.time() < end:
            seq = f"{k}:{i}"
            async with conn.transaction():
                await conn.execute(business, i, f"note {i}")
                await q.enqueue(JOB_NAME, orjson.dumps(_body(seq, i)))
            notes.append((seq, time.time()))
            i += 1
        w1 = time.time()
        await conn.close()
        _write(log, notes)
        return {"count": i, "w0": w0, "w1": w1}

    return work


def _build() -> Any:
    from outbox import Registry

    reg = Registry()

    @reg.job(JOB_NAME)
    def started(body: Any, ctx: Any) -> None:
        note_start(body["seq"], ctx.enqueued_at.timestamp())

    return reg


def __getattr__(name: str) -> Any:
    # ``outbox worker bench --app bench.w_pipeline:APP``; built on first use.
    if name == "APP":
        return _build()
    raise AttributeError(name)


async def pgqueuer_consumer(url: str) -> None:
    """pgqueuer's QueueManager with its default ``run()`` settings, until SIGTERM."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    qm = QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(url))))

    @qm.entrypoint(JOB_NAME)
    async def started(job: Any) -> None:
        note_start(orjson.loads(job.payload)["seq"])

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, qm.shutdown.set)
    await qm.run()


if __name__ == "__main__" and sys.argv[1:2] == ["pgqueuer"]:
    try:
        import uvloop  # pgqueuer's own runner defaults to it
    except ImportError:
        asyncio.run(pgqueuer_consumer(sys.argv[2]))
    else:
        uvloop.run(pgqueuer_consumer(sys.argv[2]))
