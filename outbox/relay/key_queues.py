"""Ordering keys used in two queues, as a broker relay (JetStream, Redis) sees them.

On the SQL queue a key's line spans queues (``outbox.db.ordering`` locks one row per
key, whatever the queue). On a broker each queue is its own stream (or set of streams) with its
own ordered partitions, so two jobs of one key in two queues are each in order within their
queue only. Nothing in the outbox's rows can enforce that once the earlier one is
published, so the relay says so instead: it remembers the queue of the last
``SEEN_KEYS`` keys it published (key digests, in memory; never logged) and logs one
``relay.ordering_key_queues`` warning per batch that puts a key in a queue other than
the one it last went to (``keys``: how many, ``queues``: which). A relay that restarted
forgets; keys recorded in one queue each never cost more than a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from outbox.db.rows import StoredIntent
from outbox.log import get_logger

log = get_logger("outbox.relay")

SEEN_KEYS = 10_000


class KeyQueues:
    """The queue each recently published key went to; ``check`` warns of a change."""

    def __init__(self, limit: int = SEEN_KEYS) -> None:
        self._limit = limit
        self._queue_of: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()  # lanes in flight publish side by side

    def check(self, intents: Iterable[StoredIntent]) -> int:
        """Note the keyed ``intents`` about to be published; how many of their keys
        change queue (each counted once, with the warning logged once for the batch)."""
        spanning: set[str] = set()
        queues: set[str] = set()
        with self._lock:
            self._note(intents, spanning, queues)
        if spanning:
            log.warning("relay.ordering_key_queues", keys=len(spanning), queues=sorted(queues))
        return len(spanning)

    def _note(self, intents: Iterable[StoredIntent], spanning: set[str], queues: set[str]) -> None:
        seen = self._queue_of
        for i in intents:
            if i.ordering_key is None:
                continue
            key, queue = str(i.ordering_key), str(i.queue)
            before = seen.get(key)
            if before is not None:
                seen.move_to_end(key)
                if before != queue:
                    spanning.add(key)
                    queues.update((before, queue))
            seen[key] = queue
            if len(seen) > self._limit:
                seen.popitem(last=False)
