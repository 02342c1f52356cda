"""Publishing a batch with its PubAcks awaited together.

Every message goes out at once, each with a reply subject of its own under one inbox
that this publisher subscribes to once; the acknowledgements come back in any order and
fill the batch's slots; the batch's one future resolves with the last. One batch costs
about one round trip, not one per message.

nats-py has ``publish_async`` for this, but it turns an error reply (a stream at its
limits answers 503) into an exception inside its callback, so the future never resolves
and the batch would wait for its timeout. Here an error reply fills its slot with a
``PublishRefused`` that says what JetStream said.

The batch's frames are written here, all of them into one buffer handed to the client's
write queue at once (``wire.frames``): nats-py's ``publish`` validates and encodes every
header of every message in Python, which cost the relay more CPU than everything else
it does per row. A client that is reconnecting, or that lacks the write queue, gets the
messages one ``publish`` at a time instead.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from outbox.jetstream import wire

NO_RESPONDERS = "503"


@dataclass(frozen=True, slots=True)
class Acked:
    stream: str
    seq: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class PublishRefused:
    """JetStream's error reply: ``err_code`` (e.g. 10077), ``description``."""

    code: int
    err_code: int
    description: str

    @property
    def full(self) -> str | None:
        """``max_msgs``/``max_bytes`` when the stream is at that limit, else None."""
        text = self.description.lower()
        if "maximum messages" in text:
            return "max_msgs"
        if "maximum bytes" in text:
            return "max_bytes"
        return None


Outcome = Acked | PublishRefused


def outcome_of(msg: Msg) -> Outcome:
    """What one PubAck (or JetStream's error reply) says."""
    if msg.headers and msg.headers.get("Status") == NO_RESPONDERS:
        return PublishRefused(503, 0, "no stream listens on the subject")
    try:
        body = orjson.loads(msg.data)
    except ValueError:
        return PublishRefused(0, 0, "the reply is not JSON")
    error = body.get("error") if isinstance(body, dict) else {"description": "not an object"}
    if error:
        return PublishRefused(
            int(error.get("code", 0)),
            int(error.get("err_code", 0)),
            str(error.get("description", "")),
        )
    return Acked(
        str(body.get("stream", "")), int(body.get("seq", 0)), bool(body.get("duplicate", False))
    )


class _Batch:
    """The outcomes of one batch, slot by slot; ``done`` resolves when all are in."""

    def __init__(self, number: int, size: int) -> None:
        self.number = number
        self.outcomes: list[Outcome | None] = [None] * size
        self.missing = size
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if size == 0:
            self.done.set_result(None)

    def fill(self, slot: int, outcome: Outcome) -> None:
        if 0 <= slot < len(self.outcomes) and self.outcomes[slot] is None:
            self.outcomes[slot] = outcome
            self.missing -= 1
            if self.missing == 0 and not self.done.done():
                self.done.set_result(None)


class BatchPublisher:
    """Publishes to JetStream over ``nc`` and awaits each message's PubAck."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._numbers = itertools.count()
        self._batches: dict[int, _Batch] = {}  # several when the relay has lanes

    async def _on_reply(self, msg: Msg) -> None:
        number, _, slot = msg.subject.rpartition(".")[2].partition("-")
        if not (number.isdigit() and slot.isdigit()):
            return
        batch = self._batches.get(int(number))
        if batch is not None:  # else a late reply to a batch that timed out: dropped
            batch.fill(int(slot), outcome_of(msg))

    async def publish(
        self, messages: list[tuple[str, bytes, dict[str, str]]], timeout: float
    ) -> list[Outcome]:
        """Publish ``(subject, body, headers)`` each; return their outcomes in order.
        ``TimeoutError`` when not every PubAck came back within ``timeout``."""
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)
        batch = _Batch(next(self._numbers), len(messages))
        self._batches[batch.number] = batch
        replies = [f"{self._inbox}.{batch.number}-{i}" for i in range(len(messages))]
        try:
            await self._send(messages, replies)
            async with asyncio.timeout(timeout):
                await batch.done
            return [o for o in batch.outcomes if o is not None]
        finally:
            del self._batches[batch.number]

    async def _send(
        self, messages: list[tuple[str, bytes, dict[str, str]]], replies: list[str]
    ) -> None:
        nc = self._nc
        data = wire.frames(messages, replies, nc.max_payload) if nc.is_connected else None
        if data is not None and await wire.enqueue(nc, data):
            return
        for (subject, body, headers), reply in zip(messages, replies, strict=True):
            await nc.publish(subject, body, reply=reply, headers=headers)
