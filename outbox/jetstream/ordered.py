"""Jobs with an ordering key on JetStream: one key's jobs one at a time, in stream order.

The relay publishes a keyed job on its key's partition subject
(``names.ordered_subject``; ``names.partition`` is a stable digest of the key), in the
order its intents were committed (``outbox.relay.jetstream``). Each partition has its
own durable consumer with ``max_ack_pending=1``, shared by every worker process: the
server delivers a partition's next message only once the one before it was acked or
terminated, so however many workers run, a key never has two jobs running and never
runs a later one first. What holds the line is what keeps the message unacked:

- running (its in-progress acks renew it each lease/3, as for any job);
- a retry: a NAK with the backoff keeps it the partition's one pending message, and it
  is redelivered first when the delay is over;
- a snooze: a NAK with the snooze's delay too, not a new message at the end of the
  stream (that would run later jobs of the key first). JetStream counts that redelivery,
  so before the NAK the worker writes the job's snooze count into the key-value bucket
  ``OUTBOX_SNOOZES`` (key ``<stream>.<sequence>``); a redelivered keyed message reads it
  and takes those deliveries off its attempt, so a snooze spends no attempt, and the
  count feeds ``MAX_SNOOZES`` as the header does for a keyless job. If the write fails
  the message is left alone and comes back after the ack wait (a retry, counted);
- a worker that dies: the ack wait (the lease) returns the message, still first.

A dead letter terminates the message, which releases the partition, so the key goes
on (the default). ``dead_letter_holds_key=True`` cannot be kept here: holding a dead
letter's message unacked would block every key of its partition, so the JetStream
worker refuses such a handler at start (``outbox.jetstream.worker``).

The partitions are shared by keys (``names.ORDERED_PARTITIONS``): a key waiting for its
backoff or snooze also holds the other keys of its partition, and at most that many keys
of a queue run at once. A key's order wins over its priority: keyed jobs run from their
partitions, beside the bands of keyless ones, with slots of their own (``--concurrency``
again): the lane below holds a pull request open on every partition while it has a free
slot, one message each.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from outbox.db.rows import ClaimedJob
from outbox.jetstream import names
from outbox.jetstream.lane import Lane, delivery_meta
from outbox.log import get_logger

log = get_logger("outbox.worker")
SNOOZES = "OUTBOX_SNOOZES"


async def snooze_bucket(js: JetStreamContext) -> KeyValue:
    """The bucket of keyed jobs' snooze counts, created when missing."""
    try:
        return await js.key_value(SNOOZES)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=SNOOZES, history=1)


class OrderedLane(Lane):
    """The keyed jobs of one queue: a puller per ordered partition, one message each."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kv: KeyValue | None = None
        self.snoozed: dict[int, int] = {}  # stream seq → its snoozes (from the bucket)
        self.empty: set[int] = set()  # partitions whose last request found nothing

    def _consumer_name(self, index: int) -> str:
        return names.ordered_consumer(index)

    def _want(self) -> int:
        return max(0, self._free())

    async def _open(self) -> None:
        self.kv = await snooze_bucket(self.js)
        for puller in self.pullers:
            await puller.start()

    def _uncounted(self, seq: int) -> int:
        return self.snoozed.get(seq, 0)

    def _snoozes(self, msg: Msg) -> int:
        return self.snoozed.get(delivery_meta(msg)[0], 0)

    def _snooze(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        self._spawn(self._snooze_in_line(msg, job, n, due_ms))

    async def _snooze_in_line(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        """Count the snooze, then NAK with its delay: the job keeps its place."""
        assert self.kv is not None
        try:
            await self.kv.put(_key(self.queue, job.id), str(n).encode())
        except Exception as exc:
            log.warning("worker.snooze_failed", queue=self.queue, error=type(exc).__name__)
            return
        self.ctx.stats.snoozed += 1
        self.snoozed.pop(job.id, None)
        delay = max(0, due_ms - self.ctx.now_ms()) / 1000
        self._send(partial(msg.nak, delay=delay))

    def _ended(self, seq: int) -> None:
        if self.snoozed.pop(seq, None) and self.kv is not None:
            self._spawn(self._forget(seq))

    async def _forget(self, seq: int) -> None:
        assert self.kv is not None
        with contextlib.suppress(Exception):  # a leftover count is harmless
            await self.kv.purge(_key(self.queue, seq))

    def _arrived(self, msg: Msg) -> None:
        seq, delivered, _ = delivery_meta(msg)
        if delivered > 1 and self.kv is not None:  # it may have been snoozed: ask first
            self._spawn(self._arrived_again(msg, seq))
        else:
            super()._arrived(msg)

    async def _arrived_again(self, msg: Msg, seq: int) -> None:
        assert self.kv is not None
        try:
            entry = await self.kv.get(_key(self.queue, seq))
            value = (entry.value or b"0").decode()
            if value.isdigit() and int(value):
                self.snoozed[seq] = int(value)
        except KeyNotFoundError:
            pass
        except Exception as exc:  # counted as attempts: never more runs than allowed
            log.warning("worker.snooze_lookup_failed", queue=self.queue, error=type(exc).__name__)
        super()._arrived(msg)

    def _request_ended(self, band: int) -> None:
        p = self.pullers[band]
        if p.got == 0 and not p.failed:
            self.empty.add(band)
        else:
            self.empty.discard(band)
        self.room.set()

    def _free(self) -> int:
        """Free slots. While there is one, every partition has a request open: the lane
        cannot know which partitions have a message, and a request per free slot would
        leave a partition unasked for rounds. So a lane may hold, waiting for a slot (its
        lease renewed), a message per partition more than its cap."""
        return self.cap - self._held()

    async def run(self) -> None:
        """Keep one request open on each partition while a slot is free for its message."""
        w, config = self.ctx, self.ctx.config
        wait = min(config.sleep, 0.25) if config.stop_when_empty else config.sleep
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            start = 0
            while not w.stopping.is_set() and not w.done():
                if config.stop_when_empty and (
                    self.paused() or (len(self.empty) == len(self.pullers) and not self._held())
                ):
                    break
                sent = False
                now = w.clock()
                n = len(self.pullers)
                for k in range(n):  # a fair start: the partition after the last asked
                    i = (start + k) % n
                    p = self.pullers[i]
                    if self.paused() or self._free() <= 0:
                        break
                    if p.busy(now):
                        continue
                    if p.failed:
                        log.warning("worker.fetch_failed", queue=self.queue, error=p.failed)
                        p.failed = ""
                        continue
                    try:
                        await p.request(1, wait)
                    except Exception as exc:  # reconnecting: wait, try again
                        log.warning(
                            "worker.fetch_failed", queue=self.queue, error=type(exc).__name__
                        )
                        await w.pause(config.sleep)
                        break
                    start, sent = i + 1, True
                if not sent:
                    self.room.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self.room.wait()
            await self._finish()
        finally:
            await self._close(beat)

    async def run_round(self) -> None:
        """One round: what each partition can deliver now, run and settled."""
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            for p in self.pullers:
                if self._free() <= 0:
                    break
                await p.request(1, 0.0, no_wait=True)
            while any(p.busy(self.ctx.clock()) for p in self.pullers):
                self.room.clear()
                await self.room.wait()
            while self.waiting or self.busy or self.tasks:
                if self.busy:
                    await self.idle.wait()
                elif self.tasks:
                    await asyncio.wait(set(self.tasks))
                else:
                    await asyncio.sleep(0)
        finally:
            self.cancel()
            await self._close(beat)


def _key(queue: str, seq: int) -> str:
    """The bucket key of one message: its stream (a valid key) and sequence."""
    return f"{names.stream(queue)}.{seq}"
