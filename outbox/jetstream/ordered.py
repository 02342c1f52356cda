"""Jobs with an ordering key on JetStream: the transport of a ``KeyedLane``.

What keeps a key's line whatever the broker (what holds it, what releases it, shared
partitions, slots) is ``outbox.queue.broker.ordered``'s; this is how JetStream keeps it.

The relay publishes a keyed job on its key's partition subject
(``names.ordered_subject``), in the order its intents were committed
(``outbox.relay.jetstream``). Each partition has its own durable consumer with
``max_ack_pending=1``, shared by every worker process: the server delivers a partition's
next message only once the one before it was acked or terminated. What keeps the
message unacked:

- running: its in-progress acks renew it each lease/3;
- a retry: a NAK with the backoff keeps it the partition's one pending message, and it
  is redelivered first when the delay is over;
- a snooze: a NAK with the snooze's delay too. JetStream counts that redelivery, so
  before the NAK the worker writes the job's snooze count into the bucket of uncounted
  deliveries (``outbox.jetstream.uncounted``, as for releases); a redelivered keyed
  message reads it and takes those deliveries off its attempt, so a snooze spends no
  attempt, and the count feeds ``MAX_SNOOZES`` as the header does for a keyless job.
  If the write fails the message is left alone and comes back after the ack wait (a
  retry, counted);
- a worker that dies: the ack wait (the lease) returns the message, still first.

A dead letter terminates the message, which releases the partition. The lane below asks
the partitions in turn, one message each, and never has more requests open than it has
free slots (``KeyedLane._asked``): with a slot for every partition each request is held
open, else each is answered at once and a sweep that found nothing pauses ``sleep``.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from outbox.db.rows import ClaimedJob
from outbox.jetstream import names, uncounted
from outbox.jetstream.lane import Lane, delivery_meta
from outbox.jetstream.uncounted import Counts
from outbox.log import get_logger
from outbox.queue.broker.ordered import KeyedLane, LaneContext

log = get_logger("outbox.worker")


class OrderedLane(KeyedLane[Msg], Lane):
    """The keyed jobs of one queue: a puller per ordered partition, one message each."""

    def __init__(
        self,
        ctx: LaneContext,
        nc: Client,
        js: JetStreamContext,
        queue: str,
        cap: int,
        partitions: int = names.ORDERED_PARTITIONS,
    ) -> None:
        super().__init__(ctx, nc, js, queue, cap, partitions)
        self.empty: set[int] = set()  # partitions whose last request found nothing
        self.swept: set[int] = set()  # asked at once, found nothing, since the last pause

    def _consumer_name(self, index: int) -> str:
        return names.ordered_consumer(index)

    def _snoozes(self, msg: Msg) -> int:
        return self.counts.get(delivery_meta(msg)[0], Counts()).snoozes

    def _snooze(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        self._spawn(self._snooze_in_line(msg, job, n, due_ms))

    async def _snooze_in_line(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        """Count the snooze, then NAK with its delay: the job keeps its place."""
        assert self.kv is not None
        counts = Counts(n, self.counts.get(job.id, Counts()).released)
        try:
            await self.kv.put(uncounted.key(self.queue, job.id), counts.encode())
        except Exception as exc:
            log.warning("worker.snooze_failed", queue=self.queue, error=type(exc).__name__)
            return
        self.ctx.stats.snoozed += 1
        self.counts.pop(job.id, None)
        delay = max(0, due_ms - self.ctx.now_ms()) / 1000
        self._send(partial(msg.nak, delay=delay))

    def _request_ended(self, band: int) -> None:
        p = self.pullers[band]
        if p.got == 0 and not p.failed:
            self.empty.add(band)
        else:
            self.empty.discard(band)
            self.swept.discard(band)  # it had a message: it may have the next one
        self.room.set()

    def _asked(self) -> int:
        now = self.ctx.clock()
        return sum(p.busy(now) for p in self.pullers)

    async def run(self) -> None:
        """Ask the partitions in turn while a slot is free for a message."""
        w, config = self.ctx, self.ctx.config
        wait = min(config.sleep, 0.25) if config.stop_when_empty else config.sleep
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            start, swept = 0, self.swept
            while not w.stopping.is_set() and not w.done():
                n = len(self.pullers)
                if config.stop_when_empty and (
                    self.paused() or (len(self.empty) == n and not self._held())
                ):
                    break
                self.room.clear()  # before looking: what happens after wakes the wait
                sent = False
                free = self._free()  # again after each request only: skipping changes nothing
                hold = free >= n  # a slot for every partition: wait on each
                for k in range(n):  # a fair start: the partition after the last asked
                    i = (start + k) % n
                    p = self.pullers[i]
                    if self.paused() or free <= 0:
                        break
                    if p.busy(w.clock()) or (not hold and i in swept):
                        continue
                    if p.failed:
                        failed, p.failed = p.failed, ""
                        await self._fetch_failed(failed)
                        break
                    if not hold:
                        swept.add(i)  # before asking: its answer may come at once
                    try:
                        await p.request(1, wait, no_wait=not hold)
                    except Exception as exc:  # reconnecting: wait, try again
                        swept.discard(i)
                        await self._fetch_failed(type(exc).__name__)
                        break
                    start, sent = i + 1, True
                    free = self._free()
                if sent:
                    continue
                if len(swept) == n and not any(p.busy(w.clock()) for p in self.pullers):
                    swept.clear()  # every partition answered: the next sweep after a pause
                    await w.pause(wait)
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self.room.wait()
            await self._finish()
        finally:
            await self._close(beat)

    async def _ask_round(self) -> None:
        """A round asks each partition once, at once, each when a slot is free for its
        message (a slot frees as a request ends empty or a job settles)."""
        for p in self.pullers:
            while self._free() <= 0:
                if self._jobs_left() <= 0 or self.ctx.stopping.is_set():
                    return
                self.room.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.25):  # a lost answer ends at its deadline
                        await self.room.wait()
            await p.request(1, 0.0, no_wait=True)
