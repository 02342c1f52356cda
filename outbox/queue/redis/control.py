"""Queue administration on Redis: ``outbox queue stats/jobs/failed/retry/forget/pause/
resume/cancel --broker redis://…``.

The queues are the ones with keys on the server (a ``SCAN`` for the hash tags of
``outbox.queue.redis.names``); a dead letter is an entry of a queue's dead stream whose
``data`` is the record ``outbox.jetstream.codec.dead_body`` writes (or ``foreign_body``
for an entry that was not ours), so the listing reads as on JetStream. ``retry`` puts a
dead letter back on its band stream as a new job entry, attempts reset to 0, and deletes
the dead entry in the same step (one ``MULTI``, on the queue's one node); a foreign entry
cannot be re-driven (it names no job) and is left for ``forget``.

Pausing sets ``names.paused_key``: every worker's fetch reads it (``outbox.queue.redis.lane``).

``jobs`` lists the entries of a queue's job streams (read with ``XRANGE``, never
consumed) and its delayed set, without payloads: an entry at or before its group's
last-delivered id is ``reserved`` (delivered and not acknowledged: an ack deletes it),
a later one ``ready`` (or ``delayed`` when its due time is ahead); a member of the delayed
set (a retry's backoff, a snooze, an early delivery handed back) is ``delayed``.

``cancel`` of a job no worker holds takes it out and writes its dead letter (class
``cancelled``) in one script (``CANCEL``), so a worker fetching it at the same moment
either got it first (the entry is then reserved) or finds nothing. A reserved entry is
left where it is and flagged instead, as on SQL and JetStream: its id goes into the
queue's cancel hash (``names.cancel_key``), which its worker reads with its next lease
renewal (each third of the lease): the handler sees ``ctx.cancelled`` (an async one is
cancelled), and the worker records the cancellation (a dead letter, class
``cancelled``) when it returns, whatever it returned; an ack finds the flag too
(``scripts.ACK``), so a job that finishes before its worker read the flag is recorded
as cancelled all the same. The entry stays pending until then, so a keyed job's next
job waits as it would for any run. A flagged job whose worker dies or stops comes back
with its flag: the next worker never starts it once it has read the flag, and records
the cancellation. Nothing is read or written for a job id that is not found: the
streams stay as they were.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from outbox.db.driver import CANCELLED_FAILURE
from outbox.db.rows import ClaimedJob
from outbox.errors import BrokerError, MessageNotFound
from outbox.jetstream import codec
from outbox.queue.redis import names
from outbox.queue.redis.connect import RedisUrl, checked_client
from outbox.queue.redis.lane import DATA, entry_id_int, job_fields

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
                if message_id is not None:
                    raise BrokerError(
                        f"dead letter {message_id} is an entry outbox did not write; it "
                        "cannot run (`outbox queue forget` it)"
                    )
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
    partition = body.get("subject")  # a keyed job goes back into its key's line
    keyed = isinstance(partition, str) and partition in names.ordered_streams(queue)
    target = partition if keyed else names.stream(queue, priority)
    async with r.pipeline(transaction=True) as pipe:
        pipe.xadd(target, dict(zip(fields[::2], fields[1::2], strict=True)))
        pipe.hdel(names.cancel_key(queue), dead.message_id)  # it runs again: no flag
        if keyed:
            pipe.xadd(names.wake_stream(queue), {"w": "1"}, maxlen=1)
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


async def pause(url: RedisUrl, queue: str) -> tuple[bool, bool]:
    """Pause ``queue``: (changed, known) — changed is False when it was paused already,
    known is False when the server had no key of the queue (a new queue or a typo)."""
    r = await checked_client(url)
    try:
        known = queue in await queues(r)
        return bool(await r.set(names.paused_key(queue), b"1", nx=True)), known
    finally:
        await r.aclose()


async def resume(url: RedisUrl, queue: str) -> bool:
    """Resume ``queue``; False when it was not paused."""
    r = await checked_client(url)
    try:
        return bool(await r.delete(names.paused_key(queue)))
    finally:
        await r.aclose()


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """One job of a queue, as ``queue jobs --broker redis://`` shows it."""

    job: ClaimedJob  # its payload is never shown
    state: Literal["ready", "delayed", "reserved"]
    stream: str  # the stream it is on, or the delayed set
    entry: bytes | None  # its stream entry id; None in the delayed set
    member: bytes | None = None  # its member of the delayed set


async def jobs(url: RedisUrl, queue: str | None, limit: int) -> list[WaitingJob]:
    """Up to ``limit`` jobs, queue by queue: the streams oldest first, then the delayed set
    soonest due first."""
    r = await checked_client(url)
    try:
        return await _jobs(r, queue, limit)
    finally:
        await r.aclose()


async def _jobs(
    r: Any, queue: str | None, limit: int | None, message_id: str | None = None
) -> list[WaitingJob]:
    out: list[WaitingJob] = []
    now_ms = int(time.time() * 1000)
    for q in await queues(r):
        if queue is not None and q != queue:
            continue
        for band, stream in enumerate(names.job_streams(q)):
            if limit is not None and len(out) >= limit:
                return out
            if not await r.exists(stream):
                continue
            delivered = await _last_delivered(r, stream)
            count = None if limit is None else limit - len(out)
            for entry_id, fields in await r.xrange(stream, count=count):
                job = _job(q, fields, entry_id_int(entry_id))
                if job is None or message_id not in (None, job.message_id):
                    continue
                job.priority = band if band < len(names.BANDS) else 0
                if _id(entry_id) <= delivered:
                    state: Literal["ready", "delayed", "reserved"] = "reserved"
                else:
                    state = "ready" if job.available_at <= now_ms else "delayed"
                out.append(WaitingJob(job, state, stream, entry_id))
        delayed = names.delayed_key(q)
        for member, due in await r.zrange(delayed, 0, -1, withscores=True):
            if limit is not None and len(out) >= limit:
                return out
            found = _delayed_job(q, member, int(due))
            if found is not None and message_id in (None, found.message_id):
                out.append(WaitingJob(found, "delayed", delayed, None, member))
    return out


async def _last_delivered(r: Any, stream: str) -> tuple[int, int]:
    for g in await r.xinfo_groups(stream):
        name = g.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == names.GROUP:
            return _id(g.get("last-delivered-id") or b"0-0")
    return (0, 0)  # no worker made the group yet: nothing was delivered


def _id(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _job(queue: str, fields: dict[bytes, bytes], seq: int) -> ClaimedJob | None:
    """The job an entry carries; None for an entry that is not ours (a worker parks it)."""
    headers = {
        k.decode(errors="replace"): v.decode(errors="replace")
        for k, v in fields.items()
        if k != DATA
    }
    try:
        return codec.decode_job(queue, seq, 0, headers, fields.get(DATA, b""))
    except codec.ForeignMessage:
        return None


def _delayed_job(queue: str, member: bytes, due_ms: int) -> ClaimedJob | None:
    """The job of a delayed-set member (``{"s": stream, "f": [field, value, ...]}``)."""
    try:
        held = orjson.loads(member)
        flat, stream = held["f"], int(held["s"])
        pairs = zip(flat[::2], flat[1::2], strict=True)
        fields = {str(k).encode(): str(v).encode() for k, v in pairs}
    except (ValueError, KeyError, TypeError):
        return None
    job = _job(queue, fields, 0)
    if job is not None:
        job.available_at = due_ms
        job.priority = stream if stream < len(names.BANDS) else 0
    return job


# Take a job entry out of its stream and write its dead letter, in one step; or, when a
# worker holds it, flag it for that worker. KEYS the stream, the dead stream and the
# cancel hash; ARGV the group, the entry id, the dead-letter record and the message id.
# 0: the entry was gone (settled meanwhile); 1: it waited (dead now); 2: flagged.
CANCEL = """
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then return 0 end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) == 'table' and p[1] then
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[2])
  return 2
end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'data', ARGV[3])
return 1
"""
# The same for a member of the delayed set: KEYS the set and the dead stream.
CANCEL_DELAYED = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', 'data', ARGV[2])
return 1
"""


async def cancel(url: RedisUrl, message_id: str) -> Literal["dead", "flagged"]:
    """Cancel job ``message_id``: "dead" when it waited (its dead letter is written
    now), "flagged" when a worker holds it (that worker records it)."""
    r = await checked_client(url)
    try:
        found = await _jobs(r, None, None, message_id)
        if not found:
            raise MessageNotFound(f"no job with message id {message_id} in a queue on Redis")
        how: Literal["dead", "flagged"] = "dead"
        done = 0
        for w in found:
            q = w.job.queue
            body = codec.dead_body(w.job, CANCELLED_FAILURE)
            dead = names.dead_stream(q)
            if w.entry is None:
                n = await r.eval(CANCEL_DELAYED, 2, w.stream, dead, w.member, body)
            else:
                keys = [w.stream, dead, names.cancel_key(q)]
                n = await r.eval(CANCEL, 3, *keys, names.GROUP, w.entry, body, message_id)
            done += int(n > 0)
            how = "flagged" if n == 2 else how
        if not done:  # every copy settled between the read and the script
            raise MessageNotFound(f"job {message_id} left its queue on Redis meanwhile")
        return how
    finally:
        await r.aclose()


def dumps(rows: list[QueueCounts], shown: str) -> str:
    data = {
        q.queue: {"ready": q.ready, "reserved": q.reserved, "delayed": q.delayed,
                  "dead": q.dead, "dead_letters": q.dead}
        for q in rows
    }
    return orjson.dumps({"broker": shown, "queues": data}).decode()
