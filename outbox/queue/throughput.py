"""Per-minute job completions for the dashboard's chart, at next to no cost to the worker.

A finished job leaves no row behind (success deletes it), so what the chart shows has to
be counted as it happens. The obvious counter, one row per queue and minute bumped by
every acknowledgement, would put every worker's acknowledgements in line for one row
lock. Instead each worker keeps its own counts::

    dispatcher thread, per settled job        every FLUSH_EVERY_S and at stop
    ─────────────────────────────────        ──────────────────────────────────────
    counts[(minute, queue)][column] += 1  ──► one INSERT … ON CONFLICT add into rows
    (a dict in memory, no lock: only the       keyed (minute, queue, worker id):
    dispatcher thread counts)                  no other worker ever writes them

The columns: ``succeeded`` (acknowledged, or committed by a transactional handler),
``retried`` (a failed attempt sent back with backoff) and ``dead`` (dead-lettered by the
worker that ran it). The dashboard sums a minute's rows over workers; ``outbox prune``
deletes minutes older than ``KEEP_MS``.

What it costs: a dict update per batch of settled jobs (tens of nanoseconds a job), and
one small write per worker every ``FLUSH_EVERY_S``; ``python -m bench --only tally``
measures the drain with and without it.

What it may miss, since it is a chart and not the ledger (no job depends on it):

- a worker killed with SIGKILL loses the counts since its last flush, at most the last
  ``FLUSH_EVERY_S`` seconds of its work; a flush the database refuses is kept and tried
  again at the next one (counts older than ``HOLD_S`` are then dropped);
- the reaper's dead letters (a lease that ran out on the last attempt) are not counted:
  no worker settled them;
- an acknowledgement the database applied but whose answer was lost counts nothing.

Minutes are placed by the database's clock, not the worker's (see ``throughput.sql``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

import orjson

from outbox.db.driver import Driver
from outbox.db.rows import ClaimedJob
from outbox.errors import DatabaseError
from outbox.log import get_logger

FLUSH_EVERY_S: Final = 10.0
KEEP_MS: Final = 24 * 3600 * 1000
HOLD_S: Final = 3600.0
SUCCEEDED: Final = 0
RETRIED: Final = 1
DEAD: Final = 2

log = get_logger("outbox.worker")


class Tally:
    """One worker's counts since its last flush. Not thread-safe: the worker's dispatcher
    thread is the only one that counts and flushes."""

    def __init__(self, worker_id: str, *, wall: Callable[[], float] = time.time) -> None:
        self.worker_id = worker_id
        self._wall = wall  # UNIX seconds; only to split the counts into minutes
        self._counts: dict[tuple[int, str], list[int]] = {}
        self._failing = False

    def add(self, column: int, jobs: Sequence[ClaimedJob]) -> None:
        """Count ``jobs`` in this minute's ``column``, each under its queue.

        Per batch, not per job, where it can: a batch of one queue, the usual case, is
        one dict update after gathering the names (``list.count`` checks that in C).
        """
        if not jobs:
            return
        minute = int(self._wall()) // 60
        queues = [job.queue for job in jobs]
        first = queues[0]
        if queues.count(first) == len(queues):
            self._bump(minute, first, column, len(queues))
            return
        for queue, n in Counter(queues).items():
            self._bump(minute, queue, column, n)

    def _bump(self, minute: int, queue: str, column: int, n: int) -> None:
        cell = self._counts.get((minute, queue))
        if cell is None:
            cell = self._counts[(minute, queue)] = [0, 0, 0]
        cell[column] += n

    @property
    def pending(self) -> bool:
        """Are there counts not yet written?"""
        return bool(self._counts)

    def flush(self, driver: Driver) -> None:
        """Add the counts to the worker's rows in one statement; on a database error keep
        them for the next flush (logged once, by class, until a flush succeeds)."""
        if not self._counts:
            return
        taken, self._counts = self._counts, {}
        now = self._wall()
        rows = [
            [round((now - minute * 60 - 30) * 1000), queue, *cell]
            for (minute, queue), cell in sorted(taken.items())
        ]
        try:
            driver.throughput_add(self.worker_id, orjson.dumps(rows).decode())
        except DatabaseError as exc:
            self._keep(taken, now)
            if not self._failing:
                cause = type(exc.__cause__).__name__ if exc.__cause__ else type(exc).__name__
                log.warning("worker.throughput_not_written", error=cause)
            self._failing = True
            return
        self._failing = False

    def _keep(self, taken: dict[tuple[int, str], list[int]], now: float) -> None:
        """Put unwritten counts back, newer counts merged in; drop what is past ``HOLD_S``."""
        oldest = int(now - HOLD_S) // 60
        for key, cell in taken.items():
            if key[0] < oldest:
                continue
            mine = self._counts.setdefault(key, [0, 0, 0])
            for i, n in enumerate(cell):
                mine[i] += n


def prune(driver: Driver, keep_ms: int = KEEP_MS) -> int:
    """Delete minutes older than ``keep_ms`` (default a day); return how many rows."""
    return driver.throughput_prune(keep_ms)
