"""Deliveries that spent no attempt, for the messages whose delivery count says otherwise.

The attempt of a job on JetStream is its message's delivery count, and JetStream counts
every delivery. Three kinds of NAK hand a message back without having run it, and their
redeliveries must not spend an attempt:

- a release: fetched, never started (a graceful stop, ``max_jobs`` reached, a thread
  that took its job after stop was asked);
- an early delivery: a job handed off before it is due, NAKed with the time left;
- a keyed job's snooze (``outbox.jetstream.ordered``), which keeps its place with a NAK.

Before such a NAK the worker writes the message's counts into the key-value bucket
``OUTBOX_SNOOZES`` (key ``<stream>.<sequence>``; value ``"<snoozes>"`` or
``"<snoozes> <released>"``, the first form being what workers before releases wrote).
A redelivered message (delivery count above 1) reads them before it starts, takes
``Counts.uncounted`` off its attempt, and its snoozes feed ``MAX_SNOOZES``; the key is
purged when the message leaves the stream. One bucket and one key per message, so the
three kinds cannot disagree about what was counted.

A write that fails leaves the NAK counted (never more runs than allowed). A lookup that
fails is tried again, the message held, until two thirds of its lease are gone
(``lookup``): only then is the delivery counted as an attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from outbox.jetstream import control, names

SNOOZES = "OUTBOX_SNOOZES"
_FIRST_RETRY_S = 0.05


@dataclass(frozen=True, slots=True)
class Counts:
    """What the deliveries of one message were besides attempts."""

    snoozes: int = 0
    released: int = 0  # releases and early deliveries: NAKs of a job never started

    @property
    def uncounted(self) -> int:
        return self.snoozes + self.released

    def encode(self) -> bytes:
        return f"{self.snoozes} {self.released}".encode()

    @classmethod
    def decode(cls, value: bytes | None) -> Counts:
        """The counts written by ``encode`` (or a bare snooze count); anything else is
        none (a value we did not write spends no attempt it cannot explain)."""
        fields = (value or b"").decode(errors="replace").split()
        if not fields or len(fields) > 2 or not all(f.isdigit() for f in fields):
            return cls()
        return cls(*(int(f) for f in fields))

    def released_once_more(self) -> Counts:
        return Counts(self.snoozes, self.released + 1)


def key(queue: str, seq: int) -> str:
    """The bucket key of one message: its stream (a valid key) and sequence."""
    return f"{names.stream(queue)}.{seq}"


async def bucket(js: JetStreamContext) -> KeyValue:
    """The counts bucket, created when missing."""
    return await control.bucket(js, SNOOZES)


async def lookup(
    kv: KeyValue, queue: str, seq: int, clock: Callable[[], float], give_up_at: float
) -> tuple[Counts, str]:
    """The counts of message ``seq`` and, when the bucket could not be read before
    ``give_up_at`` (by ``clock``), the last error's class name (the counts are then none:
    the deliveries count as attempts, never more runs than allowed)."""
    pause = _FIRST_RETRY_S
    while True:
        try:
            entry = await kv.get(key(queue, seq))
            return Counts.decode(entry.value), ""
        except KeyNotFoundError:
            return Counts(), ""
        except Exception as exc:  # the bucket's stream is unavailable: try again
            if clock() + pause >= give_up_at:
                return Counts(), type(exc).__name__
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
