"""The inbox: exactly-once effects for transactional handlers on a broker.

A broker shares no transaction with the application's database, so a worker that dies
between its handler's COMMIT and its ack would run the job again when the broker
redelivers it (JetStream after its ack wait, Redis when ``XAUTOCLAIM`` takes it back).
The inbox closes that gap the way MassTransit, NServiceBus and Wolverine do: the table
``outbox_inbox`` in the consumer's own database holds the message id of every job whose
transactional handler committed, written in that same transaction::

    BEGIN ─► INSERT the message id (ON CONFLICT DO NOTHING) ─┬─ 1 row: run the handler
                                                             │   on ctx.connection ─► COMMIT ─► ack
                                                             └─ 0 rows: a committed run had it:
                                                                 nothing runs ─► ack at once

The id is inserted before the handler runs, so a second copy running at the same time
(a redelivery racing a slow first run) waits on the first one's row lock and then sees
it (PostgreSQL, MariaDB), or waits for SQLite's one writer. A handler that fails,
snoozes or is rolled back leaves no id behind: its next attempt runs.

**Retention.** An id is kept at least ``RETENTION_S`` (a day), or the ``days`` of
``outbox prune`` when longer; ``outbox prune`` deletes older ones. A redelivery comes
within the lease (``--lease``: JetStream's ack wait, Redis's idle time before
``XAUTOCLAIM``) of the last delivery, and a relay's re-publish of the same message within
the stream's duplicate window is dropped by the broker itself; a worker with
transactional handlers refuses to start when the window plus its lease is longer than
``RETENTION_S``, so every copy the broker can still hand out finds its id.

Nothing here imports a broker's client: ``outbox prune`` calls ``prune`` without the extras.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

from outbox.db import inbox as inbox_rows
from outbox.db.connection import Connection, Database
from outbox.db.errors import is_retryable
from outbox.db.rows import ClaimedJob
from outbox.errors import ConfigurationError
from outbox.hooks import NO_HOOKS, Hooks
from outbox.log import get_logger
from outbox.queue.execute import Kind, Outcome, Runner, _failed, _HandlerRaised
from outbox.queue.registry import Handler, Registry

log = get_logger("outbox.worker")
RETENTION_S = 86_400.0
DAY_MS = 86_400_000


class InboxRunner(Runner):
    """The ``Runner`` of a broker worker with a database: a transactional handler's
    transaction also writes the message id into the inbox (the acknowledgement the SQL
    queue writes there instead); a job whose id is already there is not run."""

    def __init__(
        self, registry: Registry, worker_id: str, database: Database, hooks: Hooks = NO_HOOKS
    ) -> None:
        super().__init__(registry, worker_id, database, hooks)
        self._count_lock = threading.Lock()
        self.duplicates = 0  # redeliveries of committed jobs, acknowledged without a run

    def _run_transactional(self, job: ClaimedJob, handler: Handler, payload: Any) -> Outcome:
        def body(c: Connection) -> bool:
            if not inbox_rows.claim(c, job.message_id, job.queue):
                return False
            try:
                handler.fn(payload, self._ctx(job, c))
            except Exception as exc:
                if is_retryable(exc):
                    raise
                raise _HandlerRaised(exc) from exc
            return True

        try:
            ran = self._thread_connection().transact(body, operation="transactional job")
        except _HandlerRaised as raised:
            return _failed(job, raised.exc)
        except Exception as exc:
            self.close_thread_connection()
            return _failed(job, exc)
        if not ran:
            with self._count_lock:
                self.duplicates += 1
            log.info("worker.inbox_duplicate", queue=job.queue, message_id=job.message_id)
        return Outcome(Kind.ACKED, job)


    def seen(self, job: ClaimedJob) -> bool:
        """Is ``job``'s id in the inbox? On a connection of its own (a rare path: a job
        redelivered past its last attempt, whose run may have committed)."""
        with self.database.connect() as conn:
            return conn.read(lambda c: inbox_rows.seen(c, job.message_id), operation="inbox lookup")


def _prune_batch(age_ms: int, batch: int, c: Connection) -> int:
    return inbox_rows.prune_batch(c, age_ms, batch)


def check_retention(stream: str, duplicate_window_s: float, lease_s: float) -> None:
    """At start: every copy the broker may still hand out must find its id in the inbox
    (``duplicate_window_s``: how long the broker drops a re-published copy of ``stream``)."""
    if duplicate_window_s + lease_s > RETENTION_S:
        raise ConfigurationError(
            f"stream {stream}: duplicate_window {duplicate_window_s:g} s plus --lease "
            f"{lease_s:g} s is longer than the inbox keeps an id ({RETENTION_S:g} s): "
            "shorten either"
        )


def prune(conn: Connection, days: int, limit: int, batch: int) -> int:
    """Delete at most ``limit`` inbox ids handled ``days`` days ago or more, never one
    younger than ``RETENTION_S``; ``batch`` rows per short transaction, oldest first."""
    age_ms = max(days * DAY_MS, int(RETENTION_S * 1000))
    deleted = 0
    while deleted < limit:
        want = min(batch, limit - deleted)
        n = conn.transact(partial(_prune_batch, age_ms, want), operation="prune inbox")
        deleted += n
        log.info("prune.inbox_batch", deleted=n)
        if n < want:
            break
    return deleted
