"""oban-py workloads. Runs under its own Python >= 3.12 environment (``bench/.work/``),
which has oban and psycopg but not outbox: stdlib and oban imports only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from oban import Oban, worker

QUEUE = "bench"
LIST = 100
_state: dict[str, Any] = {"done": 0, "target": 0, "event": None}


def _payload(i: int) -> dict[str, Any]:
    # Same shape as bench.data.payload (that module imports outbox; this one cannot).
    return {"note_id": i, "user": f"u-{i % 9973:06d}", "action": "index", "text": "x" * 120}


@worker(queue=QUEUE)
class Noop:
    async def process(self, job: Any) -> None:
        _state["done"] += 1
        if _state["done"] >= _state["target"] and _state["event"] is not None:
            _state["event"].set()


def _new(i: int) -> Any:
    return Noop.new(_payload(i))  # type: ignore[attr-defined]  # added by @worker


async def prepare(url: str, n: int) -> Callable[[], Awaitable[dict[str, Any]]]:
    """Run as a child too (this interpreter): schema once, empty table, ``n`` jobs queued."""
    from oban.schema import install

    pool = await Oban.create_pool(url)
    async with pool.connection() as c:
        row = await (await c.execute("SELECT to_regclass('oban_jobs') IS NOT NULL")).fetchone()
    if not row[0]:
        await install(pool)
    async with pool.connection() as c:
        await c.execute("TRUNCATE oban_jobs")
    oban = Oban(pool=pool)
    for s in range(0, n, 1000):
        await oban.enqueue_many([_new(i) for i in range(s, min(s + 1000, n))])

    async def work() -> dict[str, Any]:
        await pool.close()
        return {"count": n}

    return work


async def drain(url: str, limit: int, n: int) -> Callable[[], Awaitable[dict[str, Any]]]:
    pool = await Oban.create_pool(url, max_size=4)
    _state.update(done=0, target=n, event=asyncio.Event())
    oban = Oban(pool=pool, queues={QUEUE: {"limit": limit}}, pruner={"max_age": 3600})

    async def work() -> dict[str, Any]:
        await oban.start()
        await _state["event"].wait()
        await oban.stop()
        await pool.close()
        return {"count": _state["done"]}

    return work


async def enqueue(url: str, n: int, mode: str) -> Callable[[], Awaitable[dict[str, Any]]]:
    pool = await Oban.create_pool(url, max_size=2)
    async with pool.connection() as c:
        await c.execute("TRUNCATE oban_jobs")
    oban = Oban(pool=pool)
    jobs = [_new(i) for i in range(n)]

    async def work() -> dict[str, Any]:
        if mode == "single":
            for j in jobs:
                await oban.enqueue(j)
        else:
            for s in range(0, n, LIST):
                await oban.enqueue_many(jobs[s : s + LIST])
        await pool.close()
        return {"count": n}

    return work
