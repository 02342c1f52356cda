"""``JobContext``: what a handler learns about the job it runs (its second argument)."""

from __future__ import annotations

from collections.abc import Container, Mapping
from datetime import UTC, datetime
from typing import Any

from outbox.log import get_logger
from outbox.queue.results_view import NO_RESULTS

DBAPIConnection = Any
"""The driver's own connection, by the database URL: ``sqlite3.Connection``,
``psycopg.Connection`` (PostgreSQL) or ``pymysql.connections.Connection`` (MariaDB/MySQL)."""


class JobContext:
    """The running job.

    ``message_id``, ``job_name``, ``queue``, ``attempt`` (1 on the first run),
    ``max_attempts``, ``enqueued_at`` (aware UTC datetime, the database's clock),
    ``log`` (a structlog logger bound to the job's id, name and attempt) and, for
    transactional handlers, ``connection``: a plain DB-API connection (``DBAPIConnection``)
    with the job's transaction open, whose commit also acknowledges the job. Write with
    its ``cursor()``; ``record()`` and ``push()`` accept it too. Do not commit or roll
    back on it: return to commit, raise to roll back.

    ``cancelled`` turns True once the worker learns that an operator cancelled the job
    (``outbox queue cancel``, read with the lease's heartbeat): a long handler checks it
    and returns early. Whatever it returns, the job is recorded as cancelled.

    ``results``: for a workflow node, its dependencies' JSON return values by node name
    (``ctx.results["charge"]``; a lookup also takes the node id), read once on first
    use; empty for other jobs.
    """

    __slots__ = (
        "_cancelled_ids",
        "_job_id",
        "_log",
        "attempt",
        "connection",
        "enqueued_at_ms",
        "job_name",
        "max_attempts",
        "message_id",
        "queue",
        "results",
    )

    def __init__(
        self,
        *,
        message_id: str,
        job_name: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        enqueued_at_ms: int,
        connection: DBAPIConnection | None = None,
        job_id: int = 0,
        cancelled_ids: Container[int] = (),
        results: Mapping[str, Any] = NO_RESULTS,
    ) -> None:
        self.message_id = message_id
        self.job_name = job_name
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.enqueued_at_ms = enqueued_at_ms
        self.connection = connection
        self._job_id = job_id
        self._cancelled_ids = cancelled_ids
        self._log: Any = None
        # A workflow node's dependencies' results (outbox.queue.results_view), read
        # on first use; empty for any other job.
        self.results = results

    @property
    def cancelled(self) -> bool:
        """Has an operator cancelled this job? (Learned with the worker's heartbeat.)"""
        return self._job_id in self._cancelled_ids

    @property
    def enqueued_at(self) -> datetime:
        """When the job entered the queue (pushed, or handed off by the relay), an aware
        UTC ``datetime`` by the database's clock."""
        return datetime.fromtimestamp(self.enqueued_at_ms / 1000, tz=UTC)

    @property
    def log(self) -> Any:
        """Bound on first use: most handlers never log, and binding costs."""
        if self._log is None:
            self._log = get_logger("outbox.job").bind(
                message_id=self.message_id, job=self.job_name, attempt=self.attempt
            )
        return self._log

    def __repr__(self) -> str:
        return (
            f"JobContext(message_id={self.message_id!r}, job_name={self.job_name!r}, "
            f"queue={self.queue!r}, attempt={self.attempt}/{self.max_attempts})"
        )
