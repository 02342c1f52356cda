"""pgqueuer workloads: drain with its asyncpg (default) or psycopg driver, and enqueue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from bench.data import JOB_NAME, payload

LIST = 100
# Jobs per enqueue call in each mode: "list" as the harness always measured it, and
# "list1000" beside record_many / push_many of 1,000 (issue 30's targets).
PER_CALL = {"single": 1, "list": LIST, "list1000": 1_000}


async def _driver(url: str, kind: str) -> Any:
    from pgqueuer import AsyncpgDriver, PsycopgDriver

    if kind == "asyncpg":
        import asyncpg

        return AsyncpgDriver(await asyncpg.connect(url))
    import psycopg

    return PsycopgDriver(await psycopg.AsyncConnection.connect(url, autocommit=True))


def _body(i: int) -> bytes:
    return orjson.dumps(payload(i))


async def _prepare(url: str, n: int) -> None:
    from pgqueuer import Queries

    q = Queries(await _driver(url, "asyncpg"))
    if not await q.schema_is_installed():
        await q.install()
    await q.driver.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
    for start in range(0, n, 1000):
        k = min(1000, n - start)
        await q.enqueue([JOB_NAME] * k, [_body(start + j) for j in range(k)], [0] * k)


def prepare(url: str, n: int) -> None:
    """Schema once, an empty queue, then ``n`` jobs queued (set-up, not measured)."""
    asyncio.run(_prepare(url, n))


async def drain(url: str, batch: int, driver: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    from pgqueuer import Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    qm = QueueManager(Queries(await _driver(url, driver)))
    done = [0]

    @qm.entrypoint(JOB_NAME)
    async def noop(job: Any) -> None:
        done[0] += 1

    async def work() -> dict[str, Any]:
        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
        return {"count": done[0]}

    return work


async def enqueue(url: str, n: int, mode: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    from pgqueuer import Queries

    q = Queries(await _driver(url, "asyncpg"))
    if not await q.schema_is_installed():  # the enqueue rows need no drain row before them
        await q.install()
    await q.driver.execute("TRUNCATE pgqueuer")
    bodies: list[bytes | None] = [_body(i) for i in range(n)]

    async def work() -> dict[str, Any]:
        if mode == "single":
            for b in bodies:
                await q.enqueue(JOB_NAME, b)
        else:
            size = PER_CALL[mode]
            for s in range(0, n, size):
                chunk = bodies[s : s + size]
                await q.enqueue([JOB_NAME] * len(chunk), chunk, [0] * len(chunk))
        return {"count": n}

    return work
