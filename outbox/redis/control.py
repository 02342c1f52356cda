"""Queue administration on Redis: ``outbox queue stats/failed/retry/forget/pause/resume
--broker redis://…``.

The queues are the ones with keys on the server (a ``SCAN`` for the hash tags of
``outbox.redis.names``); a dead letter is an entry of a queue's dead stream whose
``data`` is the record ``outbox.jetstream.codec.dead_body`` writes (or ``foreign_body``
for an entry that was not ours), so the listing reads as on JetStream. ``retry`` puts a
dead letter back on its band stream as a new job entry, attempts reset to 0, and deletes
the dead entry in the same step (one ``MULTI``, on the queue's one node); a foreign entry
cannot be re-driven (it names no job) and is left for ``forget``.

Pausing sets ``names.paused_key``: every worker's fetch reads it (``outbox.redis.lane``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from outbox.db.rows import ClaimedJob
from outbox.errors import MessageNotFound
from outbox.jetstream import codec
from outbox.redis import names
from outbox.redis.connect import RedisUrl, checked_client
from outbox.redis.lane import job_fields

_TAG = "{outbox:"


@dataclass(frozen=True, slots=True)
class QueueCounts:
    queue: str
    ready: int  # entries not yet delivered to the group
    reserved: int  # delivered and not yet acknowledged
    delayed: int  # retries, snoozes and early jobs waiting in the delayed set
    dead: int


async def queues(r: Any) -> list[str]:
    """Every queue with a key on the server, by its hash tag."""
    found: set[str] = set()
    async for key in r.scan_iter(match="\\{outbox:*", count=1000):
        text = key.decode(errors="replace")
        if text.startswith(_TAG) and "}" in text:
            found.add(text[len(_TAG) : text.index("}")])
    return sorted(found)


async def stats(url: RedisUrl) -> list[QueueCounts]:
    r = await checked_client(url)
    try:
        out = []
        for queue in await queues(r):
            ready = reserved = 0
            for stream in names.job_streams(queue):
                if not await r.exists(stream):
                    continue
                for g in await r.xinfo_groups(stream):
                    ready += int(g.get("lag") or 0)
                    reserved += int(g.get("pending") or 0)
            delayed = int(await r.zcard(names.delayed_key(queue)))
            dead = int(await r.xlen(names.dead_stream(queue)))
            out.append(QueueCounts(queue, ready, reserved, delayed, dead))
        return out
    finally:
        await r.aclose()


async def failed(url: RedisUrl, limit: int | None) -> list[codec.DeadLetter]:
    """Dead letters of every queue, newest first, at most ``limit`` (None: all)."""
    r = await checked_client(url)
    try:
        return [d for _, _, d in await _dead_letters(r, limit)]
    finally:
        await r.aclose()


async def _dead_letters(r: Any, limit: int | None) -> list[tuple[str, bytes, codec.DeadLetter]]:
    out: list[tuple[str, bytes, codec.DeadLetter]] = []
    for queue in await queues(r):
        for entry_id, fields in await r.xrange(names.dead_stream(queue)):
            dead = codec.decode_dead(0, fields.get(b"data", b""))
            if dead is not None:
                out.append((queue, entry_id, dead))
    out.sort(key=lambda t: t[2].failed_at_ms, reverse=True)  # newest first, as on SQL
    return out if limit is None else out[:limit]


async def retry(url: RedisUrl, message_id: str | None) -> int:
    """Re-drive one dead letter (or all, ``None``); how many went back."""
    r = await checked_client(url)
    try:
        n = 0
        for queue, entry_id, dead in await _dead_letters(r, None):
            if message_id is not None and dead.message_id != message_id:
                continue
            if not dead.job_name:  # a foreign entry: nothing to run
                continue
            await _redrive(r, queue, entry_id, dead)
            n += 1
        if message_id is not None and n == 0:
            raise MessageNotFound(f"no dead letter on Redis has message id {message_id}")
        return n
    finally:
        await r.aclose()


async def _redrive(r: Any, queue: str, entry_id: bytes, dead: codec.DeadLetter) -> None:
    body = dead.body
    priority = int(body.get("priority") or 0)
    job = ClaimedJob(
        id=0,
        message_id=dead.message_id,
        queue=queue,
        job_name=dead.job_name,
        payload=str(body.get("payload", "null")),
        attempts=0,
        max_attempts=dead.max_attempts,
        created_at=int(body.get("created_at_ms") or time.time() * 1000),
        available_at=0,
    )
    fields = job_fields(job, 0, snoozes=0, before=0)
    async with r.pipeline(transaction=True) as pipe:
        pipe.xadd(names.stream(queue, priority), dict(zip(fields[::2], fields[1::2], strict=True)))
        pipe.xdel(names.dead_stream(queue), entry_id)
        await pipe.execute()


async def forget(url: RedisUrl, message_id: str) -> int:
    r = await checked_client(url)
    try:
        n = 0
        for queue, entry_id, dead in await _dead_letters(r, None):
            if dead.message_id == message_id:
                n += int(await r.xdel(names.dead_stream(queue), entry_id))
        if n == 0:
            raise MessageNotFound(f"no dead letter on Redis has message id {message_id}")
        return n
    finally:
        await r.aclose()


async def pause(url: RedisUrl, queue: str) -> bool:
    """Pause ``queue``; False when it was paused already."""
    r = await checked_client(url)
    try:
        return bool(await r.set(names.paused_key(queue), b"1", nx=True))
    finally:
        await r.aclose()


async def resume(url: RedisUrl, queue: str) -> bool:
    """Resume ``queue``; False when it was not paused."""
    r = await checked_client(url)
    try:
        return bool(await r.delete(names.paused_key(queue)))
    finally:
        await r.aclose()


def dumps(rows: list[QueueCounts], shown: str) -> str:
    data = {
        q.queue: {"ready": q.ready, "reserved": q.reserved, "delayed": q.delayed,
                  "dead": q.dead, "dead_letters": q.dead}
        for q in rows
    }
    return orjson.dumps({"broker": shown, "queues": data}).decode()
