"""One queue of the Redis worker: the transport of its ``BrokerLane``.

What a lane does whatever the broker is ``outbox.queue.broker.lane``'s; this module speaks
Redis Streams for it, with consumer group ``names.GROUP`` on each of the queue's band
streams (every worker process one consumer of it)::

    fetch ─► PROMOTE due delayed jobs ─► RECLAIM (every lease/2) ─► FETCH bands 0..9 ─┐
      └─ nothing: XREADGROUP BLOCK on every band until an entry comes (or ``sleep``) ◄┘
    ack ─► XACK + XDEL (one pipeline a burst);  retry / snooze / early ─► DEFER into the
    delayed set, due later;  dead letter ─► BURY on the dead stream;
    lease ─► EXTEND each lease/3 (XCLAIM JUSTID resets the idle time)

**Attempts.** An entry's attempt is its fields' ``Outbox-Attempts-Before`` plus its
delivery count in the group: 1 when read fresh, more when ``XAUTOCLAIM`` took it back
from a worker that died (or a lease that ran out). A retry comes back as a new entry
carrying the attempts spent; a snooze and a hand-back (a graceful stop's prefetch, an
early delivery) carry one fewer, so they spend none. Nothing else needs remembering:
the count travels with the job.

**Leases.** A delivery stays in the consumer's pending list until it is acked; one idle
longer than ``--lease`` is taken back by any worker's ``RECLAIM`` (``XAUTOCLAIM``). The
ticker resets the idle time of every entry the lane holds, running or waiting, each
lease/3. Every write that ends a delivery without an ack first checks that the entry is
still this consumer's (``scripts.OWNED``): a worker whose lease ran out changes nothing.

**A stream deleted under a running worker** (``DEL``, a ``FLUSHDB``) loses its group:
the next read fails with ``NOGROUP``, and the lane creates the groups again and goes
on; the entries it held are gone with the stream, and their acks are no-ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from redis import exceptions
from redis.asyncio import Redis

from outbox.db.rows import ClaimedJob, Failure
from outbox.jetstream import codec
from outbox.log import get_logger
from outbox.queue.broker.context import LaneContext
from outbox.queue.broker.lane import BrokerLane
from outbox.queue.execute import Kind, Outcome
from outbox.queue.redis import names, scripts

log = get_logger("outbox.worker")
DATA = names.DATA_FIELD.encode()
PROMOTE_BATCH = 100
_BLOCK_MAX_S = 1.0  # a blocking read's longest wait: a stop or a resume is seen by then
# How long the first ack of a burst waits for others before they go in one round trip: a
# socket write from the loop could wait for the GIL behind a handler thread (up to the
# interpreter's switch interval), so fewer writes a job is what a drain gains most from.
# The entries stay pending meanwhile, well within their lease.
ACK_GATHER_S = 0.005
ACK_GATHER_MAX = 32
# Writes that end a delivery otherwise than with an ack (``_guarded``), in flight at once:
# each takes a connection of the client's pool for its round trip, and a graceful stop
# hands back the whole read-ahead (up to ``outbox.queue.prefetch.MAX_ADAPTIVE``) at once.
GUARDED_AT_ONCE = 16


@dataclass(slots=True, eq=False)
class Entry:
    """One delivery: a stream entry read by this worker's consumer."""

    stream: int  # index into ``names.job_streams(queue)``: the band, or 10 + partition
    id: bytes
    fields: dict[bytes, bytes]
    delivered: int = 1
    snoozes: int = 0  # a keyed job's snoozes, kept beside its held delivery


Done = tuple[Entry, ClaimedJob]  # a delivery whose job succeeded, waiting for its ack


def job_fields(job: ClaimedJob, due_ms: int, *, snoozes: int, before: int) -> list[str]:
    """The fields of ``job`` as a new entry, due at ``due_ms``: the JetStream headers
    (``outbox.jetstream.codec``) and ``data``, as the relay writes them."""
    headers = codec.headers_of(job, due_ms, snoozes=snoozes, attempts_before=before)
    flat: list[str] = []
    for k, v in headers.items():
        flat += (k, v)
    return [*flat, names.DATA_FIELD, job.payload]


def entry_id_int(entry_id: bytes) -> int:
    """A stream entry id (``ms-seq``) as the ``int`` a ``ClaimedJob`` carries."""
    ms, _, seq = entry_id.partition(b"-")
    return (int(ms) << 32) | int(seq or b"0")


class RedisLane(BrokerLane[Entry]):
    """Fetches the keyless jobs of one queue from its band streams and writes what
    follows each. Without ``prefetch`` it reads ahead as the SQL worker claims ahead
    (``BrokerLane.adaptive``): each fetch is a round trip (a script over the bands), so
    a window of two paid one per job, and quick jobs now pay one per few hundred; a
    graceful stop hands them back unspent."""

    adaptive = True

    def __init__(
        self, ctx: LaneContext, r: Redis, blocking: Redis, queue: str, cap: int, consumer: str
    ) -> None:
        super().__init__(ctx, queue, cap, len(names.BANDS))
        self.r, self.blocking, self.consumer = r, blocking, consumer
        self.streams = names.job_streams(queue)
        self.band_streams = names.band_streams(queue)
        self.own_streams = self.band_streams  # the streams this lane reads
        self.wake_keys: list[str] = []  # the wake stream a dead letter adds to (keyed jobs)
        self._script: dict[str, Any] = {}
        self._writes = asyncio.Semaphore(GUARDED_AT_ONCE)
        self._acks: list[Done] = []
        self.cancel_key = names.cancel_key(queue)
        self._marks: set[str] = set()  # the cancel marks as this lane last read them
        self._reclaim_at = 0.0
        self._next_due_ms: float | None = None
        self.empty = False  # the last fetch found nothing anywhere

    # -- fetching -----------------------------------------------------------------

    def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        script = self._script.get(name)
        if script is None:
            script = self._script[name] = self.r.register_script(getattr(scripts, name))
        return script(keys=keys, args=args)

    async def ensure_groups(self) -> None:
        """The group on every stream the lane reads (made with the stream when missing;
        an existing group keeps its place)."""
        for stream in self.own_streams:
            with contextlib.suppress(exceptions.ResponseError):  # BUSYGROUP: it exists
                await self.r.xgroup_create(stream, names.GROUP, id="0", mkstream=True)

    async def run(self) -> None:
        w, config = self.ctx, self.ctx.config
        await self.ensure_groups()
        beat = asyncio.create_task(self._beat())
        try:
            while not w.stopping.is_set() and not w.done():
                if config.stop_when_empty and self.paused():
                    break
                if config.stop_when_empty and self.empty and not self._held():
                    break
                if self.paused():  # no fetch reads the key now: look at it each ``sleep``
                    await w.pause(config.sleep)
                    await self._look_paused()
                    continue
                want = self._want()
                if want <= 0:
                    await self._wait_for_room()
                    continue
                try:
                    await self._fetch(want)
                except exceptions.ResponseError as exc:
                    await self._read_failed(exc)
                except (exceptions.ConnectionError, exceptions.TimeoutError, OSError) as exc:
                    log.warning("worker.fetch_failed", queue=self.queue, error=type(exc).__name__)
                    await w.pause(config.sleep)
            await self._finish()
        finally:
            await self._close(beat)

    async def _read_failed(self, exc: exceptions.ResponseError) -> None:
        """``NOGROUP``: a stream (and its group) was deleted under the worker: make them
        again and go on. Anything else: say so, pause ``sleep``, try again."""
        if "NOGROUP" in str(exc):
            log.warning("worker.group_recreated", queue=self.queue)
            await self.ensure_groups()
            return
        log.warning("worker.fetch_failed", queue=self.queue, error=type(exc).__name__)
        await self.ctx.pause(self.ctx.config.sleep)

    async def _wait_for_room(self) -> None:
        self.room.clear()
        if self._want() > 0 or self.ctx.stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.ctx.config.sleep):
                await self.room.wait()

    async def _fetch(self, want: int) -> None:
        """Due delayed jobs back, dead workers' entries taken back, then the bands in
        order; when all are empty, one blocking read on every band."""
        now_ms = self.ctx.now_ms()
        if self._next_due_ms is None or self._next_due_ms <= now_ms:
            await self._promote(now_ms)
        got = await self._reclaim(want) if self.ctx.clock() >= self._reclaim_at else 0
        got += await self._read(want - got) if want > got else 0
        if got == 0:
            got = await self._block()
        self.empty = got == 0

    async def _promote(self, now_ms: int) -> None:
        keys = [names.delayed_key(self.queue), names.dead_stream(self.queue), *self.streams]
        moved, nxt = await self._run("PROMOTE", keys, [now_ms, PROMOTE_BATCH])
        if moved >= PROMOTE_BATCH:
            self._next_due_ms = None  # more are due: again at the next fetch
        else:
            self._next_due_ms = float(nxt) if nxt else float("inf")

    async def _reclaim(self, want: int) -> int:
        """Entries idle past the lease, from a worker that died: this one's now."""
        self._reclaim_at = self.ctx.clock() + self.ctx.config.lease / 2
        lease_ms = int(self.ctx.config.lease * 1000)
        got = 0
        for i, stream in enumerate(self.band_streams):
            if got >= want:
                break
            args = [names.GROUP, self.consumer, lease_ms, want - got]
            for entry_id, flat, delivered in await self._run("RECLAIM", [stream], args):
                self._took(Entry(i, entry_id, _pairs(flat), int(delivered)))
                got += 1
        if got:
            log.info("worker.reclaimed", queue=self.queue, entries=got)
        return got

    async def _read(self, want: int) -> int:
        keys = [names.paused_key(self.queue), *self.band_streams]
        out = await self._run("FETCH", keys, [names.GROUP, self.consumer, want])
        self._set_paused(bool(out[0]))
        got = 0
        for band, entries in out[1:]:
            for entry_id, flat in entries:
                self._took(Entry(int(band), entry_id, _pairs(flat)))
                got += 1
        return got

    async def _block(self) -> int:
        """Wait on every band at once for the next entry (at most one each), until
        ``sleep``, a delayed job's due time, or a second at most."""
        if self.paused():
            return 0
        wait_s = min(self.ctx.config.sleep, _BLOCK_MAX_S)
        if self._next_due_ms is not None:
            wait_s = min(wait_s, max(0.0, (self._next_due_ms - self.ctx.now_ms()) / 1000))
        if self.ctx.config.stop_when_empty:
            wait_s = min(wait_s, 0.05)
        block_ms = max(1, int(wait_s * 1000))
        streams: Any = {s: ">" for s in self.band_streams}
        res: Any = await self.blocking.xreadgroup(
            names.GROUP, self.consumer, streams, count=1, block=block_ms
        )
        got = 0
        for stream, entries in res or []:
            band = self.band_streams.index(stream.decode())
            for entry_id, fields in entries:
                self._took(Entry(band, entry_id, dict(fields)))
                got += 1
        return got

    async def _look_paused(self) -> None:
        try:
            self._set_paused(bool(await self.r.exists(names.paused_key(self.queue))))
        except Exception as exc:  # the connection is down: the next look tries again
            log.debug("worker.paused_lookup_failed", queue=self.queue, error=type(exc).__name__)

    def _set_paused(self, paused: bool) -> None:
        was = self.queue in self.ctx.paused
        if paused and not was:
            self.ctx.paused.add(self.queue)
            log.info("worker.queue_paused", queue=self.queue)
            self.ctx.paused_changed()  # the queue's other lane too: its queued jobs wait
        elif was and not paused:
            self.ctx.paused.discard(self.queue)
            log.info("worker.queue_resumed", queue=self.queue)
            self.ctx.paused_changed()

    def _took(self, entry: Entry) -> None:
        self._wait_for_slot(entry)

    # -- the transport ------------------------------------------------------------

    def _decode(self, e: Entry) -> ClaimedJob | None:
        headers, data = _headers(e), e.fields.get(DATA)
        try:
            if data is None:
                raise codec.ForeignMessage(f"field {names.DATA_FIELD} is missing")
            return codec.decode_job(self.queue, entry_id_int(e.id), e.delivered, headers, data)
        except codec.ForeignMessage as exc:
            body = codec.foreign_body(self.queue, e.delivered, headers, data or b"", str(exc))
            log.warning("worker.foreign_message", queue=self.queue, entry=e.id.decode())
            self._spawn(self._foreign(e, body))
            return None

    async def _foreign(self, e: Entry, body: bytes) -> None:
        if await self._copy_dead(e, body):
            self.ctx.stats.dead += 1

    def _band(self, e: Entry) -> int:
        return e.stream

    def _ack(self, e: Entry, job: ClaimedJob) -> None:
        first = not self._acks
        self._acks.append((e, job))
        if first:
            self._send(self._send_acks)

    async def _send_acks(self) -> None:
        if not self._closed and len(self._acks) < ACK_GATHER_MAX:
            await asyncio.sleep(ACK_GATHER_S)
        acks, self._acks = self._acks, []
        if not await self._ack_now(acks, check=True):
            await self._ack_uncancelled(acks)

    async def _ack_now(self, acks: list[Done], *, check: bool) -> bool:
        """``scripts.ACK`` of ``acks``; False (nothing acked) when ``check`` and the
        queue has cancel marks."""
        by_stream: dict[int, list[bytes]] = {}
        for e, _ in acks:
            by_stream.setdefault(e.stream, []).append(e.id)
        if not by_stream:
            return True
        keys: list[str] = [self.cancel_key]
        args: list[Any] = [names.GROUP, "1" if check else "0"]
        for i, ids in by_stream.items():
            keys.append(self.streams[i])
            args += [len(ids), *ids]
        return bool(await self._run("ACK", keys, args))

    # -- cancelled while held: ``outbox queue cancel`` marks, this lane settles ----

    async def _ack_uncancelled(self, acks: list[Done]) -> None:
        """An ack the cancel marks stopped: each job an operator cancelled is recorded as
        cancelled (the policy decides, as if the worker had known when the handler
        returned); the others are acked. A transactional job's effects committed with its
        inbox row: the policy acks it all the same, and its mark goes."""
        marks = await self._look_for_cancels()
        keep: list[Done] = []
        w = self.ctx
        for e, job in acks:
            if job.message_id not in marks:
                keep.append((e, job))
                continue
            handler = w.registry.get(job.job_name)
            if handler is not None and handler.transactional:
                keep.append((e, job))  # its effects committed: acked, its mark dropped
                continue
            w.stats.succeeded -= 1  # counted by the ack this replaces
            w.runner.cancelled.add(job.id)
            self._settle(e, Outcome(Kind.DONE, job))
        if await self._ack_now(keep, check=False) and keep:
            # their marks, if any: a transactional job's, or one set since the marks
            # were read (the job finished first); a mark left would make every later
            # ack of the queue take this slow path
            await self.r.hdel(self.cancel_key, *(job.message_id for _, job in keep))

    async def _look_for_cancels(self) -> set[str]:
        """Read the queue's cancel marks: the jobs this lane holds that an operator
        cancelled see ``ctx.cancelled`` now (an async handler is cancelled), one fetched
        and not started never runs (``BrokerLane._start``)."""
        found: Any = await self.r.hkeys(self.cancel_key)
        marks = {m.decode(errors="replace") for m in found}
        w = self.ctx
        w.cancel_marks -= self._marks - marks  # re-driven since (``queue retry``)
        w.cancel_marks |= marks
        self._marks = marks
        for _, job in list(self.running.values()):
            if job.message_id in marks and job.id not in w.runner.cancelled:
                self.cancel_job(job.message_id)
        return marks

    def _retry(self, e: Entry, job: ClaimedJob, delay_ms: int) -> None:
        due = self.ctx.now_ms() + delay_ms
        snoozes = codec.snooze_count(_headers(e))
        self._defer(e, due, job_fields(job, due, snoozes=snoozes, before=job.attempts))

    def _snooze(self, e: Entry, job: ClaimedJob, n: int, due_ms: int) -> None:
        fields = job_fields(job, due_ms, snoozes=n, before=job.attempts - 1)
        self._spawn(self._defer_now(e, due_ms, fields, snooze=True))

    def _snoozes(self, e: Entry) -> int:
        return codec.snooze_count(_headers(e))

    def _hand_back(self, e: Entry, delay: float | None = None) -> None:
        """Back in the delayed set, due after ``delay`` (or now), with this delivery
        taken off its attempts: the fields as they were, ``Outbox-Attempts-Before``
        counting the deliveries before this one."""
        due = self.ctx.now_ms() + int((delay or 0) * 1000)
        fields = dict(e.fields)
        before = int(fields.get(codec.ATTEMPTS_BEFORE.encode(), b"0") or b"0")
        before += e.delivered - 1
        fields.pop(codec.ATTEMPTS_BEFORE.encode(), None)
        if before:
            fields[codec.ATTEMPTS_BEFORE.encode()] = str(before).encode()
        flat: list[str] = []
        for k, v in fields.items():
            flat += (k.decode(errors="replace"), v.decode(errors="replace"))
        self._releasing_now(self._defer_now(e, due, flat))

    def _defer(self, e: Entry, due_ms: int, fields: list[str]) -> None:
        self._spawn(self._defer_now(e, due_ms, fields))

    async def _defer_now(
        self, e: Entry, due_ms: int, fields: list[str], *, snooze: bool = False
    ) -> None:
        """Into the delayed set, due at ``due_ms``; the entry leaves (if still ours)."""
        member = orjson.dumps({"s": e.stream, "u": uuid.uuid4().hex, "f": fields})
        keys = [self.streams[e.stream], names.delayed_key(self.queue)]
        args = [names.GROUP, e.id, self.consumer, due_ms, member]
        if await self._guarded(e, "DEFER", keys, args, "worker.defer_failed"):
            self._deferred(due_ms, snooze)

    def _deferred(self, due_ms: int, snooze: bool) -> None:
        """A job put off until ``due_ms``: the next fetch looks for it then."""
        self.ctx.stats.snoozed += snooze
        if self._next_due_ms is None or due_ms < self._next_due_ms:
            self._next_due_ms = due_ms

    async def _guarded(
        self, e: Entry, script: str, keys: list[str], args: list[Any], failed: str
    ) -> bool:
        """Run ``script``, a write that ends ``e``'s delivery otherwise than with an ack
        (``scripts.OWNED`` guards it). False when it failed (logged as ``failed``) or the
        lease was lost: the entry is left as it was and comes back after its lease, so
        nothing is lost."""
        try:
            async with self._writes:
                done = bool(await self._run(script, keys, args))
        except Exception as exc:
            log.warning(failed, queue=self.queue, error=type(exc).__name__)
            return False
        if not done:
            log.warning("worker.lease_lost", queue=self.queue, entry=e.id.decode())
        return done

    async def _dead_letter(self, e: Entry, job: ClaimedJob, failure: Failure) -> bool:
        stream = self.streams[e.stream]
        ordered = stream if e.stream >= len(names.BANDS) else None  # its key's partition
        buried = await self._copy_dead(e, codec.dead_body(job, failure, ordered))
        if buried:  # a mark has no job left to stop (cancelled, or dead before it was read)
            with contextlib.suppress(Exception):  # left behind, ``queue retry`` drops it
                await self.r.hdel(self.cancel_key, job.message_id)
        return buried

    async def _copy_dead(self, e: Entry, body: bytes, guard: bool = True) -> bool:
        """The dead-letter record on the dead stream, the entry gone, in one step; if it
        fails the entry stays pending and comes back after its lease: nothing is lost."""
        keys = [self.streams[e.stream], names.dead_stream(self.queue), *self.wake_keys]
        args = [names.GROUP, e.id, self.consumer, body, "1" if guard else "0"]
        return await self._guarded(e, "BURY", keys, args, "worker.dead_letter_failed")

    async def _extend(self, held: list[Entry]) -> None:
        """The lease of every entry held renewed; then the cancel marks read (as the SQL
        worker's heartbeat learns of cancelled jobs)."""
        by_stream: dict[int, list[bytes]] = {}
        for e in held:
            by_stream.setdefault(e.stream, []).append(e.id)
        for i, ids in by_stream.items():
            await self._run("EXTEND", [self.streams[i]], [names.GROUP, self.consumer, *ids])
        await self._look_for_cancels()


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _headers(e: Entry) -> dict[str, str]:
    """The entry's fields but ``data``, as text (a plain loop: half the cost of a
    comprehension with ``errors="replace"``, paid by every job); bytes that are not
    UTF-8 are replaced, so a foreign entry is parked, never a crash."""
    out: dict[str, str] = {}
    try:
        for k, v in e.fields.items():
            if k != DATA:
                out[k.decode()] = v.decode()
    except UnicodeDecodeError:
        return {k.decode(errors="replace"): v.decode(errors="replace")
                for k, v in e.fields.items() if k != DATA}  # fmt: skip
    return out
