"""One queue of the JetStream worker: the transport of its ``BrokerLane``.

What a lane does whatever the broker (the window, the cap, the threads, timeouts,
settling through ``outbox.queue.policy``, the lease ticker, a graceful stop) is
``outbox.queue.broker.lane``'s; this module speaks JetStream for it::

    puller callback ─► (a redelivery: its uncounted deliveries read) ─► waiting …
    ack ─► ``+ACK``;  retry ─► NAK with the backoff;  dead letter ─► a copy on the
    dead-letter stream, then ``+TERM``;  lease ─► an in-progress ack each lease/3

A snooze publishes the job again, due later, and terminates its message (the format is
in ``outbox.jetstream.codec``): a NAK would spend an attempt, as JetStream counts every
delivery. A keyed job's snooze must keep its place, so ``outbox.jetstream.ordered``'s
lane overrides the hooks for it (``_snooze``, ``_snoozes``). A NAK of a job that never
started (a release, an early delivery) is written down first, so its redelivery spends no
attempt (``outbox.jetstream.uncounted``).

One puller per priority band (``names.consumer``), one request open at a time: each
fetch asks the most urgent band first and moves to the next only when a band has
nothing now (``_request_ended``).
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from outbox.db.rows import ClaimedJob, Failure
from outbox.jetstream import codec, names, uncounted
from outbox.jetstream.pull import Puller
from outbox.jetstream.uncounted import Counts
from outbox.log import get_logger
from outbox.queue.broker.context import LaneContext
from outbox.queue.broker.lane import BrokerLane, quietly

log = get_logger("outbox.worker")


def delivery_meta(msg: Msg) -> tuple[int, int, float]:
    """Stream sequence, delivery count and the delivery time in UNIX ms, read from the
    reply subject (``$JS.ACK.<stream>.<consumer>.<delivered>.<seq>.<cseq>.<ns>.<pending>``)
    without building nats-py's ``Metadata``; other forms go through it."""
    parts = (msg.reply or "").split(".")
    if len(parts) == 9 and parts[1] == "ACK":
        return int(parts[5]), int(parts[4]), int(parts[7]) / 1e6
    meta = msg.metadata
    return meta.sequence.stream, meta.num_delivered, meta.timestamp.timestamp() * 1000


class Lane(BrokerLane[Msg]):
    """Fetches the jobs of one queue from JetStream and writes what follows each."""

    def __init__(
        self,
        ctx: LaneContext,
        nc: Client,
        js: JetStreamContext,
        queue: str,
        cap: int,
        bands: int = 1,
    ) -> None:
        super().__init__(ctx, queue, cap, bands)
        self.js = js
        self._ended_empty = False  # a held-open request found nothing
        self._linger = False  # the last no_wait request found nothing: hold the next open
        self.kv: KeyValue | None = None  # the bucket of uncounted deliveries
        self.counts: dict[int, Counts] = {}  # stream seq → its uncounted deliveries
        self.pullers = [
            Puller(
                nc,
                names.stream(queue),
                self._consumer_name(b),
                self._arrived,
                partial(self._request_ended, b),
                ctx.clock,
            )
            for b in range(bands)
        ]
        self.band = 0  # the band the next request goes to
        self.puller = self.pullers[0]
        self._sweep_lingered = False  # this sweep's band-0 request was held open

    def _consumer_name(self, index: int) -> str:
        """The durable consumer of puller ``index``: one per priority band here."""
        return names.consumer(index)

    def _uncounted(self, seq: int) -> int:
        """Deliveries of message ``seq`` that spent no attempt: its releases and early
        deliveries, and a keyed job's snoozes (``outbox.jetstream.uncounted``)."""
        return self.counts.get(seq, Counts()).uncounted

    def _snoozes(self, msg: Msg) -> int:
        """How often the job of ``msg`` was snoozed (here: its message's header)."""
        return codec.snooze_count(msg.headers)

    def _snooze(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        self._spawn(self._snooze_now(msg, job, n, due_ms))

    def _ended(self, seq: int) -> None:
        """Message ``seq`` left the stream (acked or terminated): its counts go too."""
        if self.counts.pop(seq, None) is not None and self.kv is not None:
            self._spawn(self._forget(seq))

    async def _forget(self, seq: int) -> None:
        assert self.kv is not None
        with contextlib.suppress(Exception):  # a leftover count is harmless
            await self.kv.purge(uncounted.key(self.queue, seq))

    # -- fetching -----------------------------------------------------------------

    def _asking(self) -> bool:
        return self.puller.busy(self.ctx.clock())

    async def _open(self) -> None:
        """Before the first fetch: the bucket of uncounted deliveries, every puller's inbox."""
        self.kv = await uncounted.bucket(self.js)
        for puller in self.pullers:
            await puller.start()

    async def _fetch_failed(self, error: str) -> None:
        """A pull request failed or was refused: say so, pause ``sleep`` (stop ends the
        pause), then ask again (every lane's one decision on it)."""
        log.warning("worker.fetch_failed", queue=self.queue, error=error)
        await self.ctx.pause(self.ctx.config.sleep)

    async def run(self) -> None:
        """Fetch until stopped, done, or (``stop_when_empty``) nothing is left."""
        w, config = self.ctx, self.ctx.config
        wait = min(config.sleep, 0.25) if config.stop_when_empty else config.sleep
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            while not w.stopping.is_set() and not w.done():
                if self.puller.failed:
                    failed, self.puller.failed = self.puller.failed, ""
                    await self._fetch_failed(failed)
                    continue
                if config.stop_when_empty and self.paused():
                    break  # nothing is claimable from a paused queue
                if config.stop_when_empty and self._ended_empty and not self._held():
                    break
                want = self._want()
                if want <= 0:
                    await self._wait_for_room()
                    continue
                self._ended_empty = False
                try:
                    await self.puller.request(want, wait, no_wait=not self._linger)
                except Exception as exc:  # the connection is reconnecting: wait, try again
                    await self._fetch_failed(type(exc).__name__)
            await self._finish()
        finally:
            await self._close(beat)

    async def run_round(self) -> None:
        """One round (``JetStreamWorker.run_once``): one request for what is deliverable
        now, then run and settle all of it; the acks are out when it returns."""
        await self._open()
        beat = asyncio.create_task(self._beat())
        try:
            await self._ask_round()
            await self._round_settled()
        finally:
            self.cancel()  # only a round's timeout leaves async handlers running
            await self._close(beat)

    async def _ask_round(self) -> None:
        """A round's requests: one for what the window takes, of the first band."""
        want = self._want()
        if want > 0:
            await self.puller.request(want, 0.0, no_wait=True)

    async def _round_settled(self) -> None:
        """Until every request of the round has ended (its last message or status, or its
        deadline), then until what it fetched has run and settled."""
        while True:
            now = self.ctx.clock()
            open_ = [p for p in self.pullers if p.busy(now)]
            if not open_:
                break
            self.room.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(max(p.deadline for p in open_) - now, 0.01)):
                    await self.room.wait()
        await self._all_settled()

    async def _wait_for_room(self) -> None:
        """Until a fetch may be due: the open request's end, or at most ``sleep`` (a
        lane that reached ``max_jobs`` through another lane's starts is told nothing)."""
        self.room.clear()
        if self._want() > 0 or self.ctx.stopping.is_set():
            return
        wait = self.ctx.config.sleep
        if self.puller.open:
            wait = min(max(self.puller.deadline - self.ctx.clock(), 0.01), wait)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self.room.wait()

    def _arrived(self, msg: Msg) -> None:
        seq, delivered, _ = delivery_meta(msg)
        if delivered > 1 and self.kv is not None:  # it may have been released: ask first
            self.looking += 1
            self._spawn(self._arrived_again(msg, seq))
        else:
            self._wait_for_slot(msg)

    async def _arrived_again(self, msg: Msg, seq: int) -> None:
        """A redelivery: read its uncounted deliveries before it may start."""
        assert self.kv is not None
        began = self.ctx.clock()
        give_up_at = began + self.ctx.config.lease * 2 / 3
        try:
            counts, error = await uncounted.lookup(
                self.kv, self.queue, seq, self.ctx.clock, give_up_at
            )
        finally:
            self.looking -= 1
        if error:  # counted as attempts: never more runs than allowed
            log.warning("worker.count_lookup_failed", queue=self.queue, error=error)
        if counts.uncounted:
            self.counts[seq] = counts
        if self.ctx.clock() - began > self.ctx.config.lease / 3:  # the beat did not see it
            await quietly(msg.in_progress())
        self._wait_for_slot(msg)

    def _request_ended(self, band: int) -> None:
        if band != self.band:
            return  # a late status of a request given up (``Puller.busy``)
        p = self.puller
        if p.got == 0 and not p.failed:
            if band == 0:
                self._sweep_lingered = p.lingered
            if band + 1 < len(self.pullers):  # nothing in this band now: the next one
                self._to_band(band + 1)
                self._linger = False
            else:  # every band empty: hold the next request open, on the most urgent
                self._to_band(0)
                self._ended_empty, self._linger = self._sweep_lingered, True
        else:
            self._to_band(0)
            self._linger = False
        self.room.set()

    def _to_band(self, band: int) -> None:
        self.band, self.puller = band, self.pullers[band]

    # -- the transport ----------------------------------------------------------

    def _decode(self, msg: Msg) -> ClaimedJob | None:
        """The job of ``msg``, its uncounted deliveries taken off its attempt; a message
        that is not ours is copied to the dead letters (None)."""
        queue = self.queue
        seq, delivered, _ = delivery_meta(msg)
        try:
            job = codec.decode_job(queue, seq, delivered, msg.headers, msg.data)
        except codec.ForeignMessage as exc:
            body = codec.foreign_body(queue, delivered, msg.headers, msg.data, str(exc))
            log.warning("worker.foreign_message", queue=queue, seq=seq)
            self._spawn(self._foreign(msg, seq, body))
            return None
        job.attempts -= self._uncounted(seq)
        return job

    async def _foreign(self, msg: Msg, seq: int, body: bytes) -> None:
        if await self._copy_dead(msg, seq, body):
            self.ctx.stats.dead += 1

    def _band(self, msg: Msg) -> int:
        return names.band_of_subject(msg.subject)

    def _ack(self, msg: Msg, job: ClaimedJob) -> None:
        self._send(msg.ack)
        self._ended(job.id)

    def _retry(self, msg: Msg, job: ClaimedJob, delay_ms: int) -> None:
        self._send(partial(msg.nak, delay=delay_ms / 1000))

    async def _dead_letter(self, msg: Msg, job: ClaimedJob, failure: Failure) -> bool:
        ordered = msg.subject if names.is_ordered(msg.subject) else None  # its key's partition
        return await self._copy_dead(msg, job.id, codec.dead_body(job, failure, ordered))

    async def _extend(self, held: list[Msg]) -> None:
        for msg in held:
            await quietly(msg.in_progress())

    async def _closing(self) -> None:
        for puller in self.pullers:
            with contextlib.suppress(Exception):
                await puller.stop()

    async def _snooze_now(self, msg: Msg, job: ClaimedJob, n: int, due_ms: int) -> None:
        """Publish the job again, due at ``due_ms``, then terminate this message; if the
        publish fails this one is left alone and comes back after the ack wait (as a
        retry), nothing lost."""
        headers = codec.headers_of(
            job,
            due_ms,
            msg_id=f"{job.message_id}:snooze:{job.id}",
            snoozes=n,
            attempts_before=job.attempts - 1,
        )
        try:
            await self.js.publish(msg.subject, msg.data, headers=headers)  # the same band
        except Exception as exc:
            log.warning("worker.snooze_failed", queue=self.queue, error=type(exc).__name__)
            return
        self.ctx.stats.snoozed += 1
        self._send(msg.term)

    def _hand_back(self, msg: Msg, delay: float | None = None) -> None:
        """NAK a message whose job did not run (after ``delay`` seconds, or at once),
        its redelivery written down first as one that spends no attempt."""
        if self.kv is None:
            self._send(msg.nak if delay is None else partial(msg.nak, delay=delay))
            return
        self._releasing_now(self._hand_back_now(msg, delay))

    async def _hand_back_now(self, msg: Msg, delay: float | None) -> None:
        assert self.kv is not None
        seq = delivery_meta(msg)[0]
        counts = self.counts.pop(seq, Counts()).released_once_more()
        try:
            await self.kv.put(uncounted.key(self.queue, seq), counts.encode())
        except Exception as exc:  # the NAK goes out anyway, counted: sooner than the ack wait
            log.warning("worker.release_count_failed", queue=self.queue, error=type(exc).__name__)
        self._send(msg.nak if delay is None else partial(msg.nak, delay=delay))

    async def _copy_dead(self, msg: Msg, seq: int, body: bytes) -> bool:
        """Copy to the dead-letter stream, then terminate; if the copy fails the message
        is left alone and comes back after the ack wait, so nothing is lost."""
        queue = self.queue
        dedupe = f"dead:{names.stream(queue)}:{seq}"
        try:
            await self.js.publish(names.dead_subject(queue), body, headers={codec.MSG_ID: dedupe})
        except Exception as exc:
            log.warning("worker.dead_letter_failed", queue=queue, error=type(exc).__name__)
            return False
        self._send(msg.term)
        self._ended(seq)
        return True

