"""Jobs with an ordering key on Redis Streams: the transport of a ``KeyedLane``.

What keeps a key's line whatever the broker (what holds it, what releases it, shared
partitions, slots) is ``outbox.queue.broker.ordered``'s; this is how Redis keeps it.

The relay adds a keyed job to its key's partition stream (``names.ordered_stream``), in
the order its intents were committed (``outbox.relay.redis``). Every worker process
reads the partitions through ``scripts.TAKE``, which reads a partition only while none
of its entries is pending in the group: a partition's next entry goes out once the one
before it was acked or dead-lettered (``XACK`` + ``XDEL``), whichever worker ran it.
What keeps the entry pending:

- running: the ticker resets its idle time each lease/3 (``EXTEND``), as for any job;
  cancelled by an operator meanwhile, it stays out until this worker records the
  cancellation when the handler returns (``BURY``), so the key's next job never runs
  beside it;
- a retry, a snooze, a hand-back (a stop's prefetch, a job handed off before it is due):
  ``HOLD`` leaves the entry pending and notes in the queue's held hash
  (``names.held_key``) when it is due, the delivery count it gets back (one more for a
  retry, the same for a snooze or a hand-back, so those spend no attempt) and its snooze
  count (``MAX_SNOOZES``). When due, any worker's ``TAKE`` claims it first
  (``XCLAIM … RETRYCOUNT``), never a later entry of the partition;
- a worker that dies: its entry stays pending; idle past ``--lease``, any worker's
  ``TAKE`` claims it, its delivery counted as an attempt.

A partition's entries are read in entry-id order, the order the relay added them. A
worker with free slots and nothing to take blocks on the queue's wake stream
(``names.wake_stream``), read from the id ``TAKE`` saw, so a wake written after that
``TAKE`` is never missed: the relay adds to it when it hands off a keyed job, an ack or
a dead letter when a partition is released with entries behind it, and ``HOLD`` each
time (the held delivery's due time, which the next ``TAKE`` returns, then ends the wait).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from outbox.db.rows import ClaimedJob
from outbox.jetstream import codec
from outbox.log import get_logger
from outbox.queue.broker.ordered import KeyedLane, LaneContext
from outbox.queue.redis import names
from outbox.queue.redis.lane import _BLOCK_MAX_S, Done, Entry, RedisLane, _headers, _pairs

log = get_logger("outbox.worker")
FIRST = len(names.BANDS)  # ``Entry.stream`` of partition 0: ``names.job_streams`` order


class OrderedRedisLane(KeyedLane[Entry], RedisLane):
    """The keyed jobs of one queue: one delivery out per ordered partition."""

    def __init__(
        self, ctx: LaneContext, r: Redis, blocking: Redis, queue: str, cap: int, consumer: str
    ) -> None:
        super().__init__(ctx, r, blocking, queue, cap, consumer)
        self.own_streams = names.ordered_streams(queue)
        self.wake_keys = [names.wake_stream(queue)]
        self._turn = 0  # the partition the next TAKE begins with: each its turn
        self._woke = b"0-0"  # the wake stream's last id as the last TAKE saw it
        self._releases: list[Done] = []

    def _band(self, e: Entry) -> int:
        return 0  # a key's order wins over its priority

    async def _fetch(self, want: int) -> None:
        keys = [names.paused_key(self.queue), names.held_key(self.queue), *self.wake_keys]
        args = [names.GROUP, self.consumer, want, self.ctx.now_ms(),
                int(self.ctx.config.lease * 1000), self._turn]  # fmt: skip
        out = await self._run("TAKE", keys + self.own_streams, args)
        self._set_paused(bool(out[0]))
        if out[0]:
            return
        self._next_due_ms = None if out[1] is None else float(out[1])
        self._woke = out[2]
        for part, entry_id, flat, count, snoozes in out[3:]:
            self._took(Entry(FIRST + int(part), entry_id, _pairs(flat), int(count), int(snoozes)))
        got = len(out) - 3
        self._turn = (self._turn + max(1, got)) % len(self.own_streams)
        self.empty = got == 0 and not await self._block()

    async def _block(self) -> int:
        """Wait on the wake stream until a wake, ``sleep``, the next held delivery's due
        time, or a second at most; 1 when woken (a partition may have a job)."""
        wait_s = min(self.ctx.config.sleep, _BLOCK_MAX_S)
        if self._next_due_ms is not None:
            wait_s = min(wait_s, max(0.0, (self._next_due_ms - self.ctx.now_ms()) / 1000))
        if self.ctx.config.stop_when_empty:
            wait_s = min(wait_s, 0.05)
        streams: Any = {self.wake_keys[0]: self._woke}
        res = await self.blocking.xread(streams, count=1, block=max(1, int(wait_s * 1000)))
        return 1 if res else 0

    # -- the transport: a keyed delivery stays its partition's one out -------------

    def _snoozes(self, e: Entry) -> int:
        return max(e.snoozes, codec.snooze_count(_headers(e)))

    def _ack(self, e: Entry, job: ClaimedJob) -> None:
        if not self._releases:
            self._send(self._send_releases)
        self._releases.append((e, job))

    async def _send_releases(self) -> None:
        out, self._releases = self._releases, []
        if not await self._ack_now(out, check=True):
            await self._ack_uncancelled(out)

    async def _ack_now(self, acks: list[Done], *, check: bool) -> bool:
        """``scripts.RELEASE``: the acks, each partition let go; False (nothing acked)
        when ``check`` and the queue has cancel marks."""
        if not acks:
            return True
        keys = [*self.wake_keys, self.cancel_key, *(self.streams[e.stream] for e, _ in acks)]
        args = [names.GROUP, "1" if check else "0", *(e.id for e, _ in acks)]
        return bool(await self._run("RELEASE", keys, args))

    def _retry(self, e: Entry, job: ClaimedJob, delay_ms: int) -> None:
        due = self.ctx.now_ms() + delay_ms
        self._spawn(self._hold(e, due, e.delivered + 1, self._snoozes(e)))

    def _snooze(self, e: Entry, job: ClaimedJob, n: int, due_ms: int) -> None:
        self._spawn(self._hold(e, due_ms, e.delivered, n, snooze=True))

    def _hand_back(self, e: Entry, delay: float | None = None) -> None:
        due = self.ctx.now_ms() + int((delay or 0) * 1000)
        self._releasing_now(self._hold(e, due, e.delivered, e.snoozes))

    async def _hold(
        self, e: Entry, due_ms: int, count: int, snoozes: int, *, snooze: bool = False
    ) -> None:
        """Keep ``e`` pending, due again at ``due_ms`` with delivery count ``count``."""
        keys = [self.streams[e.stream], names.held_key(self.queue), *self.wake_keys]
        part = e.stream - FIRST
        args = [names.GROUP, e.id, self.consumer, part, due_ms, count, snoozes]
        if await self._guarded(e, "HOLD", keys, args, "worker.hold_failed"):
            self._deferred(due_ms, snooze)
