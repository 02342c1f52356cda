"""The dashboard's database side: a few reusable connections and one shared overview.

Requests run their database work in Starlette's thread pool, each on a connection of
its own taken from a small idle list (a connection is never shared by two threads at
once). The overview's counts are read once per ``ttl_s`` however many browsers poll
it: ten open tabs cost the database what one does.

The paused queues are read with the counts (a table of one row per paused queue).
The chart's hour is read with them too: it comes from ``outbox_throughput``, at most a
row per minute, queue and worker however many jobs ran, so it costs the same with a
million jobs as with ten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from outbox.dashboard import store
from outbox.db.connection import Connection, Database
from outbox.log import get_logger
from outbox.queue import control

T = TypeVar("T")
IDLE_CONNECTIONS = 4
log = get_logger("outbox.dashboard")


@dataclass(frozen=True, slots=True)
class Overview:
    counts: store.Counts
    throughput: store.Throughput
    paused: frozenset[str] = frozenset()  # queue control: one row per paused queue

    @property
    def minutes(self) -> list[store.Minute]:
        return self.throughput.minutes


class Backend:
    def __init__(self, database: Database, *, ttl_s: float) -> None:
        self.database = database
        self.ttl_s = ttl_s
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._overview_lock = threading.Lock()
        self._overview: tuple[float, Overview] | None = None

    def run(self, fn: Callable[[Connection], T]) -> T:
        """``fn`` on a pooled connection; a connection that saw an error is closed."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self.database.connect()
        try:
            result = fn(conn)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(conn)
                conn = None
        if conn is not None:
            conn.close()
        return result

    async def call(self, fn: Callable[[Connection], T]) -> T:
        return await run_in_threadpool(self.run, fn)

    def overview(self) -> Overview:
        """Counts, the chart and the clock; read at most once per ``ttl_s``."""
        with self._overview_lock:
            cached = self._overview
            if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
                return cached[1]
            fresh = self.run(_read_overview)
            self._overview = (time.monotonic(), fresh)
            return fresh

    async def call_overview(self) -> Overview:
        return await run_in_threadpool(self.overview)

    def forget_overview(self) -> None:
        """After an action, so the next page shows its effect."""
        with self._overview_lock:
            self._overview = None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _read_overview(conn: Connection) -> Overview:
    return Overview(store.counts(conn), store.throughput(conn), frozenset(control.paused(conn)))
