"""The dashboard's database side: a few reusable connections and one shared overview.

Requests run their database work in Starlette's thread pool, each on a connection of
its own taken from a small idle list (a connection is never shared by two threads at
once). The overview's counts are read once per ``ttl_s`` however many browsers poll
it: ten open tabs cost the database what one does.

The throughput chart is per minute, and reading it costs an index entry per intent
recorded in the last hour (a million an hour is a million entries): it is refreshed every
``CHART_TTL_S`` in a thread of its own while pages keep showing the previous one, so
only the first page after start waits for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from starlette.concurrency import run_in_threadpool

from outbox.dashboard import store
from outbox.db.connection import Connection, Database

T = TypeVar("T")
IDLE_CONNECTIONS = 4
CHART_TTL_S = 20.0
log = structlog.get_logger("outbox.dashboard")


@dataclass(frozen=True, slots=True)
class Overview:
    counts: store.Counts
    minutes: list[store.Minute]


class Backend:
    def __init__(self, database: Database, *, ttl_s: float) -> None:
        self.database = database
        self.ttl_s = ttl_s
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._overview_lock = threading.Lock()
        self._overview: tuple[float, Overview] | None = None
        self._chart_lock = threading.Lock()
        self._chart: tuple[float, list[store.Minute]] | None = None
        self._chart_refreshing = False

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
            fresh = Overview(self.run(store.counts), self.minutes())
            self._overview = (time.monotonic(), fresh)
            return fresh

    def minutes(self) -> list[store.Minute]:
        """The chart: read now the first time, then refreshed in the background."""
        with self._chart_lock:
            cached = self._chart
            stale = cached is None or time.monotonic() - cached[0] >= CHART_TTL_S
            start = stale and cached is not None and not self._chart_refreshing
            if start:
                self._chart_refreshing = True
        if cached is None:
            return self._read_chart()
        if start:
            threading.Thread(target=self._refresh_chart, daemon=True).start()
        return cached[1]

    def _read_chart(self) -> list[store.Minute]:
        minutes = self.run(store.throughput)
        with self._chart_lock:
            self._chart = (time.monotonic(), minutes)
        return minutes

    def _refresh_chart(self) -> None:
        try:
            self._read_chart()
        except Exception as exc:  # the page keeps the previous chart; the log says why
            log.warning("dashboard.chart_failed", error=type(exc).__name__)
        finally:
            with self._chart_lock:
                self._chart_refreshing = False

    async def call_overview(self) -> Overview:
        return await run_in_threadpool(self.overview)

    def forget_overview(self) -> None:
        """After an action, so the next page shows its effect."""
        with self._overview_lock:
            self._overview = None
        with self._chart_lock:  # stale: refreshed in the background, shown until then
            if self._chart is not None:
                self._chart = (float("-inf"), self._chart[1])

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

