"""Jobs with an ordering key on a broker: one key's jobs one at a time, in stream order.

The relay hands a keyed job to its key's *ordered partition* (``outbox.relay.message.
ordered_partition``: a stable digest of the key picks one of ``ORDERED_PARTITIONS`` per
queue), in the order its intents were committed. A partition lets one delivery out at a
time, shared by every worker process: its next job is handed out only once the one
before it was acknowledged or dead-lettered, so however many workers run, a key never
has two jobs running and never runs a later one first. Each transport keeps that line
its own way (JetStream: a consumer per partition with ``max_ack_pending=1``,
``outbox.jetstream.ordered``; Redis: a script that reads a partition only while nothing
of it is pending, ``outbox.queue.redis.ordered``); what holds the line is the same on both,
what keeps the partition's one delivery out:

- running (the lane's ticker renews its lease each lease/3, as for any job);
- a retry: the delivery stays the partition's one out, due again after the backoff,
  and comes back first (never as a new message at the end of the stream, which would
  run the key's later jobs first), its attempt counted;
- a snooze: the same with the snooze's delay, its attempt not counted (the snooze count
  kept beside the delivery feeds ``MAX_SNOOZES``);
- a delivery handed back unstarted (a stop's prefetch, a job not yet due): the same,
  due at once or when the job is, its attempt not counted;
- a worker that dies: the lease runs out and the delivery comes back, still first.

A dead letter lets the delivery go, which releases the partition: the key goes on.
``dead_letter_holds_key=True`` cannot be kept (a dead letter held out would block every
key of its partition), so a broker worker refuses such a handler at start
(``outbox.queue.broker.context.refuse_sql_only``).

The partitions are shared by keys: a key waiting for its backoff or snooze holds the
other keys of its partition too, and at most ``ORDERED_PARTITIONS`` keys of a queue run
at once. A key's order wins over its priority. Keyed jobs run in a lane of their own
beside the keyless jobs' lane, with slots of their own (``--concurrency`` again), and a
keyed lane never fetches past its free slots (``KeyedLane``): a partition's delivery
fetched only to wait for a slot would hold its keys from an idle worker.
"""

from __future__ import annotations

from typing import TypeVar

from outbox.queue.broker.context import LaneContext
from outbox.queue.broker.lane import BrokerLane

__all__ = ["KeyedLane", "LaneContext"]  # the context a keyed lane is built with

D = TypeVar("D")


class KeyedLane(BrokerLane[D]):
    """What a lane of keyed jobs does whatever the broker: it asks for no more
    deliveries than it has free slots (no prefetch: each is a partition held), counting
    the requests the transport still has open (``_asked``)."""

    def _asked(self) -> int:
        """Requests open that may each still bring a delivery."""
        return 0

    def _free(self) -> int:
        """Slots for which no delivery is held and no request is open, within
        ``max_jobs``."""
        return min(self.cap - self._held(), self._jobs_left()) - self._asked()

    def _want(self) -> int:
        return max(0, self._free())
