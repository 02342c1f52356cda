"""Several batches in flight at once, one per connection, for a target that waits.

A broker target spends much of a batch waiting: for the PubAcks, while the batch's
transaction stays open. With ``in_flight`` above 1, one relay keeps that many batches
going side by side, each on a connection and a thread of its own (a *lane*), so one
batch is claimed and published while another waits for its acknowledgements. Each batch
is still one transaction that deletes only what its own PubAcks confirmed, so what a
crash leaves and what the duplicate window absorbs is unchanged; only the order of
batches across lanes is not fixed. This needs row locks (``FOR UPDATE SKIP LOCKED``) so
that batches claim disjoint rows; ``Relay.in_flight`` is 1 on SQLite.

A lane pauses after a batch that moved nothing (``outbox.relay.pauses.Deferred``: its
rows wait for another lane's batch). It stops at an empty batch (``until_short``: at
any short one), when ``stop`` is set, when ``limit`` intents have been claimed, or when
another lane failed; the first failure is raised once every lane has finished its batch
in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from outbox.db.connection import LazyConnection
from outbox.db.rows import HandoffResult
from outbox.relay.pauses import Deferred
from outbox.relay.totals import RunTotals

Once = Callable[[LazyConnection, int], HandoffResult]


class InFlight:
    def __init__(
        self, conns: list[LazyConnection], once: Once, batch_size: int, deferred_max: float
    ) -> None:
        self.conns, self.once, self.batch_size = conns, once, batch_size
        self.deferred_max = deferred_max
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._failures: list[BaseException] = []
        self._reserved = 0

    def drain(
        self,
        totals: RunTotals,
        *,
        limit: int | None,
        progress: Callable[[HandoffResult], None] | None,
        until_short: bool,
        stop: threading.Event | None,
    ) -> RunTotals:
        """Hand off on every lane until each stops; what they did, added to ``totals``."""
        done = [totals]

        def lane(conn: LazyConnection) -> None:
            deferred = Deferred(self.deferred_max)
            while not self._halt.is_set() and not (stop is not None and stop.is_set()):
                with self._lock:
                    size = self.batch_size
                    if limit is not None:
                        size = min(size, limit - self._reserved)
                    if size <= 0:
                        return
                    self._reserved += size
                try:
                    batch = self.once(conn, size)
                except BaseException as exc:
                    self._failures.append(exc)
                    self._halt.set()
                    return
                with self._lock:
                    self._reserved -= size - batch.claimed
                    if batch.claimed:
                        done[0] = done[0].add(batch)
                        if progress is not None:
                            progress(batch)
                if batch.claimed == 0 or (until_short and batch.claimed < size):
                    return
                pause = deferred.after(batch)
                if pause:
                    (stop.wait if stop is not None else self._halt.wait)(pause)

        threads = [
            threading.Thread(target=lane, args=(c,), name=f"outbox-relay-lane-{i}", daemon=True)
            for i, c in enumerate(self.conns)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self._failures:
            raise self._failures[0]
        return done[0]
