"""Publishing a batch with its PubAcks awaited together.

Every message goes out at once, each with a reply subject of its own under one inbox
that this publisher subscribes to once; the acknowledgements come back in any order and
resolve one future each. One batch costs about one round trip, not one per message.

nats-py has ``publish_async`` for this, but it turns an error reply (a stream at its
limits answers 503) into an exception inside its callback, so the future never resolves
and the batch would wait for its timeout. Here an error reply resolves its future with
a ``PublishRefused`` that says what JetStream said.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

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


class BatchPublisher:
    """Publishes to JetStream over ``nc`` and awaits each message's PubAck."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._inbox = nc.new_inbox()
        self._futures: dict[str, asyncio.Future[Outcome]] = {}
        self._sub: Subscription | None = None
        self._tokens = itertools.count()

    async def _on_reply(self, msg: Msg) -> None:
        future = self._futures.pop(msg.subject.rsplit(".", 1)[-1], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == NO_RESPONDERS:
            future.set_result(PublishRefused(503, 0, "no stream listens on the subject"))
            return
        try:
            body = orjson.loads(msg.data)
        except ValueError:
            future.set_result(PublishRefused(0, 0, "the reply is not JSON"))
            return
        error = body.get("error")
        if error:
            future.set_result(
                PublishRefused(
                    int(error.get("code", 0)),
                    int(error.get("err_code", 0)),
                    str(error.get("description", "")),
                )
            )
        else:
            future.set_result(
                Acked(
                    str(body.get("stream", "")),
                    int(body.get("seq", 0)),
                    bool(body.get("duplicate", False)),
                )
            )

    async def publish(
        self, messages: list[tuple[str, bytes, dict[str, str]]], timeout: float
    ) -> list[Outcome]:
        """Publish ``(subject, body, headers)`` each; return their outcomes in order.
        ``TimeoutError`` when not every PubAck came back within ``timeout``."""
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_reply)
        loop = asyncio.get_running_loop()
        futures = []
        for subject, body, headers in messages:
            token = str(next(self._tokens))
            future: asyncio.Future[Outcome] = loop.create_future()
            self._futures[token] = future
            futures.append(future)
            await self._nc.publish(subject, body, reply=f"{self._inbox}.{token}", headers=headers)
        try:
            async with asyncio.timeout(timeout):
                return list(await asyncio.gather(*futures))
        finally:
            for f in futures:
                f.cancel()  # no-op for the resolved ones
            self._futures.clear()
