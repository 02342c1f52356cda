"""The relay service: ``run_once`` (one batch), ``run`` (drain) and ``watch`` (forever).

The loop only schedules; every batch is ``handoff.handoff`` in one transaction, so a
relay killed at any instant loses nothing (the open batch rolls back and its rows stay
pending) and hands nothing off twice. Any number of relays may run at once.

``watch`` schedules like this: a full batch → the next one at once; a partial batch →
wait ``poll_interval``; an empty one → wait, doubling up to ``max_poll_interval``
while idle. On PostgreSQL the wait ends early when ``record()``'s NOTIFY arrives on
``outbox_relay`` (unless ``listen=False``: poll-only). A database error is logged by
class name, the connection is dropped and reopened, and the relay carries on: at once
the first time a working connection is lost (the server ended it), else after a backoff
(``outbox.db.reconnect``); ``run`` and ``run_once`` instead raise it to the caller. A broker target
(``outbox.relay.jetstream``) that is unreachable or refuses (a full stream) raises a
transient ``BrokerError``: ``watch`` logs it at most every 10 s and backs off (up to
``reconnect_max``, or ``max_poll_interval`` for a full stream), and the intents stay
pending; a non-transient one (a stream missing under ``require``) ends ``watch``.

A target that waits on a broker asks for several batches in flight (``Target.in_flight``):
where row locks allow, ``run`` and a ``watch`` that meets a backlog hand off on that many
connections side by side (``outbox.relay.inflight``), each batch still one transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from outbox import tracing
from outbox.config import settings
from outbox.db.connection import Database, LazyConnection
from outbox.db.reconnect import Reconnect
from outbox.db.rows import HandoffResult, OutboxHandoff
from outbox.errors import (
    BrokerError,
    ConfigurationError,
    DatabaseError,
    ReadOnlyDatabase,
    TargetRefused,
)
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.relay.inflight import InFlight
from outbox.relay.listen import ListenWaiter, PollWaiter, Waiter
from outbox.relay.pauses import Backoff, Deferred
from outbox.relay.target import SqlQueueTarget, Target
from outbox.relay.totals import RunTotals

log = get_logger("outbox.relay")

MAX_BATCH_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How a relay works. Every field has a default; all times are seconds.

    - ``batch_size`` (500): intents per batch, i.e. per transaction (1..10,000).
    - ``poll_interval`` (0.5): ``watch``'s wait after a partial batch; the idle wait
      starts here.
    - ``max_poll_interval`` (5.0): the longest idle wait between polls.
    - ``notify`` (True): on PostgreSQL, NOTIFY ``outbox_jobs`` when a batch hands off,
      so idle workers wake at commit.
    - ``listen`` (True): on PostgreSQL, ``watch`` LISTENs on ``outbox_relay`` to wake
      as soon as an intent commits. False is poll-only (e.g. behind PgBouncer).
    - ``verify_in_python`` (False): verify rows in Python instead of SQL (slower; for
      diagnosis). The SQL and Python verifiers apply the same rules.
    - ``reconnect_max`` (30.0): the longest pause between reconnection attempts.
    """

    batch_size: int = 500
    poll_interval: float = 0.5
    max_poll_interval: float = 5.0
    notify: bool = True
    listen: bool = True
    verify_in_python: bool = False
    reconnect_max: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigurationError("batch_size must be an int")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ConfigurationError(f"batch_size must be between 1 and {MAX_BATCH_SIZE}")
        if not 0 < self.poll_interval <= self.max_poll_interval:
            raise ConfigurationError("poll_interval must be > 0 and <= max_poll_interval")
        if self.reconnect_max <= 0:
            raise ConfigurationError("reconnect_max must be > 0")


class Relay:
    """Moves committed intents from ``outbox_messages`` to a ``Target`` (default: the
    SQL queue, ``outbox_jobs``).

    Owns one connection, opened on first use and reopened after a database error.
    Not thread-safe: give each thread its own ``Relay``.
    """

    def __init__(
        self,
        database: Database,
        config: RelayConfig | None = None,
        *,
        target: Target | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.database = database
        self.hooks = hooks
        self.config = config or RelayConfig()
        self.target: Target = target or SqlQueueTarget()
        # The relay span's messaging.system: where the batch goes.
        self._system = tracing.SQL_SYSTEM if self.target.name == "sql" else self.target.name
        self._conn = LazyConnection(database)
        self._more_conns: list[LazyConnection] = []

    def run_once(self, batch_size: int | None = None) -> HandoffResult:
        """Hand off one batch (at most ``batch_size``, default the config's)."""
        return self._once(self._conn, batch_size)

    def _once(self, conn: LazyConnection, batch_size: int | None) -> HandoffResult:
        size = self.config.batch_size if batch_size is None else batch_size
        notify = self.config.notify and self.database.dialect.supports_listen
        batch = OutboxHandoff(size, notify, self.config.verify_in_python)
        started_ns = tracing.now_ns()
        try:
            result = self.target.handoff(conn.get().driver, batch)
        except DatabaseError:
            conn.drop()
            raise
        tracing.relay_batch(self._system, started_ns, result.handed_off, result.trace_contexts)
        _log_batch(result)
        self.hooks.relay_batch(result)
        return result

    @property
    def in_flight(self) -> int:
        """Batches in flight at once: the target's wish where row locks let batches run
        side by side (``FOR UPDATE SKIP LOCKED``); SQLite's one writer makes it 1."""
        return self.target.in_flight if self.database.dialect.supports_skip_locked else 1

    def run(
        self,
        limit: int | None = None,
        *,
        progress: Callable[[HandoffResult], None] | None = None,
    ) -> RunTotals:
        """Hand off until nothing is pending (or ``limit`` intents were claimed); return totals.

        Stops on an empty batch, not a short one: with other relays at work a batch can
        come back short while rows they hold may yet be released back to pending. While
        producers keep the backlog from emptying it keeps going; pass ``limit`` to bound it.
        """
        if limit is not None and limit < 0:
            raise ConfigurationError("limit must be >= 0")
        if self.in_flight > 1:
            return self._in_flight_batches(
                RunTotals(), limit=limit, progress=progress, until_short=False
            )
        totals = RunTotals()
        deferred = Deferred(self.config.poll_interval)
        while limit is None or totals.claimed < limit:
            left = self.config.batch_size if limit is None else limit - totals.claimed
            batch = self.run_once(min(self.config.batch_size, left))
            if batch.claimed == 0:
                break
            totals = totals.add(batch)
            if progress is not None:
                progress(batch)
            time.sleep(deferred.after(batch))
        return totals

    def watch(
        self,
        stop: threading.Event,
        *,
        progress: Callable[[HandoffResult], None] | None = None,
    ) -> RunTotals:
        """Relay until ``stop`` is set; the batch in flight always finishes first."""
        waiter = self._waiter()
        totals = RunTotals()
        idle = Backoff(self.config.poll_interval, self.config.max_poll_interval)
        database = Reconnect(self.config.poll_interval, self.config.reconnect_max)
        failing = Backoff(self.config.poll_interval, self.config.reconnect_max)
        refusing = Backoff(self.config.poll_interval, self.config.max_poll_interval)
        deferred = Deferred(self.config.poll_interval)
        quiet = _RateLimitedLog()
        log.info("relay.watch", listen=isinstance(waiter, ListenWaiter))
        try:
            def trouble(exc: DatabaseError | BrokerError) -> None:
                """Wait out a failed batch (or batches in flight): the database's error
                with its reconnect pause, a transient broker error with its backoff; a
                read-only database and a broker's lasting refusal end ``watch``."""
                if isinstance(exc, ReadOnlyDatabase):
                    raise exc  # no wait fixes it: one line and exit 1, as a one-shot relay
                if isinstance(exc, DatabaseError):
                    cause = type(exc.__cause__ or exc).__name__
                    pause = database.pause(exc)
                    log.warning("relay.batch_failed", error=cause, code=exc.code,
                                retry_in_s=pause)
                    if pause:
                        waiter.wait(stop, pause)
                    return
                if not exc.transient:
                    raise exc
                quiet.log(exc)
                full = isinstance(exc, TargetRefused)
                waiter.wait(stop, refusing.next() if full else failing.next())

            while not stop.is_set():
                try:
                    batch = self.run_once()
                except (DatabaseError, BrokerError) as exc:
                    trouble(exc)
                    continue
                database.working()
                failing.reset()
                refusing.reset()
                if batch.claimed:
                    totals = totals.add(batch)
                    if progress is not None:
                        progress(batch)
                pause = deferred.after(batch)
                if pause:
                    waiter.wait(stop, pause)
                    continue
                if batch.claimed >= self.config.batch_size:
                    idle.reset()
                    if self.in_flight > 1:  # a backlog: keep several batches in flight
                        try:
                            totals = self._in_flight_batches(
                                totals, progress=progress, until_short=True, stop=stop
                            )
                        except (DatabaseError, BrokerError) as exc:
                            trouble(exc)
                    continue
                waiter.wait(stop, idle.reset() if batch.claimed else idle.next())
        finally:
            waiter.close()
            log.info("relay.stopped", handed_off=totals.handed_off)
        return totals

    def _waiter(self) -> Waiter:
        if self.config.listen and self.database.dialect.supports_listen and not settings.pooler:
            return ListenWaiter(self.database, self.config.reconnect_max)
        return PollWaiter()

    def _in_flight_batches(
        self,
        totals: RunTotals,
        *,
        limit: int | None = None,
        progress: Callable[[HandoffResult], None] | None = None,
        until_short: bool,
        stop: threading.Event | None = None,
    ) -> RunTotals:
        while len(self._more_conns) < self.in_flight - 1:
            self._more_conns.append(LazyConnection(self.database))
        batches = InFlight(
            [self._conn, *self._more_conns], self._once, self.config.batch_size,
            self.config.poll_interval,
        )
        return batches.drain(
            totals, limit=limit, progress=progress, until_short=until_short, stop=stop
        )

    def close(self) -> None:
        """Close the relay's connections (they reopen on next use) and its target's."""
        self._conn.drop()
        for conn in self._more_conns:
            conn.drop()
        self.target.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RateLimitedLog:
    """One warning per ``every`` seconds while a broker refuses or is unreachable; the
    ones in between are counted, not printed (a full stream refuses every batch)."""

    def __init__(self, every: float = 10.0) -> None:
        self.every, self._last, self._suppressed = every, float("-inf"), 0

    def log(self, exc: BrokerError) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            self._suppressed += 1
            return
        self._last, suppressed, self._suppressed = now, self._suppressed, 0
        if isinstance(exc, TargetRefused):
            log.warning("relay.target_refused", stream=exc.stream, limit=exc.limit,
                        handed_off=exc.handed_off, repeats=suppressed, detail=str(exc))
        else:
            log.warning("relay.target_unavailable", detail=str(exc), repeats=suppressed)


def _log_batch(batch: HandoffResult) -> None:
    for message_id, reason in batch.quarantined_ids:
        log.warning("relay.quarantined", message_id=message_id, reason=reason)
    emit = log.info if batch.claimed else log.debug
    emit(
        "relay.batch",
        size=batch.claimed,
        handed_off=batch.handed_off,
        quarantined=batch.quarantined,
        duration_ms=batch.ms,
    )
