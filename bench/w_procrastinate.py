"""procrastinate workloads: drain at a given concurrency, and enqueue (defer)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bench.data import JOB_NAME, QUEUE, payload

LIST = 100


def _app(url: str) -> tuple[Any, Any, list[int]]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    done = [0]

    @app.task(name=JOB_NAME, queue=QUEUE)
    async def noop(**kwargs: Any) -> None:
        done[0] += 1

    return app, noop, done


async def _prepare(url: str, n: int) -> None:
    app, noop, _ = _app(url)
    async with app.open_async():
        async with app.connector.pool.connection() as c:
            installed = await (
                await c.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            ).fetchone()
        if not installed[0]:
            await app.schema_manager.apply_schema_async()
        await app.connector.execute_query_async(
            "TRUNCATE procrastinate_jobs, procrastinate_events CASCADE"
        )
        for s in range(0, n, 1000):
            await noop.batch_defer_async(*[payload(i) for i in range(s, min(s + 1000, n))])


def prepare(url: str, n: int) -> None:
    asyncio.run(_prepare(url, n))


async def drain(url: str, concurrency: int) -> Callable[[], Awaitable[dict[str, Any]]]:
    app, _, done = _app(url)
    await app.open_async()

    async def work() -> dict[str, Any]:
        await app.run_worker_async(
            queues=[QUEUE], concurrency=concurrency, wait=False, install_signal_handlers=False
        )
        await app.close_async()
        return {"count": done[0]}

    return work


async def enqueue(url: str, n: int, mode: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    app, noop, _ = _app(url)
    await app.open_async()
    await app.connector.execute_query_async("TRUNCATE procrastinate_jobs CASCADE")
    bodies = [payload(i) for i in range(n)]

    async def work() -> dict[str, Any]:
        if mode == "single":
            for b in bodies:
                await noop.defer_async(**b)
        else:
            for s in range(0, n, LIST):
                await noop.batch_defer_async(*bodies[s : s + LIST])
        await app.close_async()
        return {"count": n}

    return work
