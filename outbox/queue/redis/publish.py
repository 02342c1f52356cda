"""Handing one queue's messages to Redis in one round trip, and waiting for replicas.

The queue's messages go in one ``scripts.HANDOFF`` call (``EVALSHA``; the script is
loaded on ``NOSCRIPT``); with ``wait`` the same pipeline, on the same connection, then
sends ``WAIT wait timeout``: Redis counts the replicas that have every write of *this*
connection, so the wait must follow the script on its connection, never on another of
the pool's. Fewer replicas than asked is a ``BrokerError``: the batch is not committed
in the outbox and its intents are published again, which the seen markers absorb.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson
import redis
from redis.commands.core import Script

from outbox.errors import BrokerError
from outbox.queue.redis import names, scripts


@dataclass(frozen=True, slots=True)
class Message:
    """One job entry: its stream and its fields (``names``: the job headers and ``data``)."""

    message_id: str
    stream: str
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class Added:
    entry_id: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Full:
    """The stream was at its length limit: the message was not added."""

    stream: str
    length: int


Outcome = Added | Full


class Publisher:
    """Runs the handoff script; one per client (the script object holds only its sha)."""

    def __init__(self, client: redis.Redis) -> None:
        self._script: Script = client.register_script(scripts.HANDOFF)

    def publish(
        self,
        node: redis.Redis,
        queue: str,
        messages: Sequence[Message],
        *,
        window_ms: int,
        max_len: int,
        wait: int = 0,
        wait_timeout: float = 5.0,
        shown: str = "",
    ) -> list[Outcome]:
        """Hand ``messages`` (all of ``queue``) to ``node``, the server of the queue's keys."""
        keys: list[str] = []
        for m in messages:
            keys += [names.seen_key(queue, m.message_id), m.stream]
        keys.append(names.wake_stream(queue))
        fields = orjson.dumps([[x for kv in m.fields.items() for x in kv] for m in messages])
        pipe = node.pipeline(transaction=False)
        self._script(keys, [window_ms, max_len, fields], client=pipe)
        if wait:
            pipe.execute_command("WAIT", wait, max(1, int(wait_timeout * 1000)))  # type: ignore[no-untyped-call]
        replies = pipe.execute()
        if wait and int(replies[1]) < wait:
            raise BrokerError(
                f"Redis at {shown}: {int(replies[1])} of {wait} replicas acknowledged a batch "
                f"of queue {queue} within {wait_timeout:g} s; its intents stay pending",
                transient=True,
            )
        return [_outcome(m, r) for m, r in zip(messages, replies[0], strict=True)]


def _outcome(m: Message, reply: list[int | bytes]) -> Outcome:
    status, value = int(reply[0]), reply[1]
    text = value.decode() if isinstance(value, bytes) else str(value)
    if status == scripts.FULL:
        return Full(m.stream, int(text))
    return Added(text, duplicate=status == scripts.DUPLICATE)
