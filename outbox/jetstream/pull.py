"""Pull requests to one durable consumer, answered on a private inbox.

``PullSubscription.fetch`` of nats-py waits for each message of a batch with its own
``asyncio.wait_for`` (a task and a timer per message, two loop turns each), which was
the largest cost of a no-op job. Here one plain subscription takes every answer in the
callback of nats-py's reader task: a batch that arrives in one read is handed over in
one loop turn. This is JetStream's documented wire API (``CONSUMER.MSG.NEXT``), the
same one ``fetch`` sends.

One request is open at a time. It ends when its last message arrives, or with a status
(404 nothing now, 408 expired, 409 and others: the consumer cannot serve it, said in
``failed``). As ``fetch`` does, a worker asks with ``no_wait`` (what is there now) and
only after an empty answer with a request held open until it expires. A request that
never ends (its server restarted) is given up ``_SLACK`` seconds after it should have
expired; a late status from it may then end the next one early, which costs one more
request, never a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DEFAULT_PREFIX

_SLACK = 2.0
_ENDS = ("404", "408")  # nothing to deliver now / the request expired: not an error


class Puller:
    """Sends pull requests for ``stream``'s durable ``consumer``; each job message goes
    to ``on_msg`` and the end of each request to ``on_end`` (on the loop's thread)."""

    def __init__(
        self,
        nc: Client,
        stream: str,
        consumer: str,
        on_msg: Callable[[Msg], None],
        on_end: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc, self._on_msg, self._on_end, self._clock = nc, on_msg, on_end, clock
        self._subject = f"{DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = ""
        self._sub: Any = None
        self.open = 0  # messages the open request may still deliver
        self.got = 0  # job messages the open (or last) request delivered
        self.failed = ""  # why the last request ended, when the consumer refused it
        self.lingered = False  # the last request waited (expires), not no_wait
        self.deadline = 0.0

    async def start(self) -> None:
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(self._inbox, cb=self._take)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    def busy(self, now: float) -> bool:
        """A request is open and may still deliver (else a new one may be sent)."""
        if self.open > 0 and now > self.deadline:
            self.open = 0  # its answer was lost (a reconnect): ask again
        return self.open > 0

    async def request(self, batch: int, expires: float, *, no_wait: bool = False) -> None:
        """Ask for up to ``batch`` messages: held open ``expires`` seconds, or with
        ``no_wait`` answered at once with what is there (404 when that is short)."""
        ask: dict[str, object] = {"batch": batch}
        if no_wait:
            ask["no_wait"] = True  # the server ignores no_wait beside expires
        else:
            ask["expires"] = int(expires * 1e9)
        self.open, self.got, self.failed, self.lingered = batch, 0, "", not no_wait
        self.deadline = self._clock() + (0.0 if no_wait else expires) + _SLACK
        try:
            await self._nc.publish(self._subject, orjson.dumps(ask), reply=self._inbox)
        except Exception:
            self.open = 0
            raise

    async def _take(self, msg: Msg) -> None:
        headers = msg.headers or {}
        # The server's statuses come without a reply subject; every delivery has one.
        status = None if msg.reply else headers.get("Status")
        if status is None:
            self.open = max(0, self.open - 1)
            self.got += 1
            self._on_msg(msg)
            if self.open == 0:
                self._on_end()
        elif status != "100":  # 100: an idle heartbeat or flow control, never asked for
            if status not in _ENDS:
                self.failed = f"{status} {headers.get('Description', '')}".strip()
            self.open = 0
            self._on_end()
