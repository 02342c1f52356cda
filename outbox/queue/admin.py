"""Queue administration: list, count, requeue and remove jobs and dead letters.

What these return never includes a payload or an exception message, except
``failed_job(message_id)``, which an operator asks for by id. Every id is a message id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outbox.db.connection import Connection, Row
from outbox.errors import ConfigurationError, InvalidJob, InvalidMessageId
from outbox.ids import is_message_id
from outbox.job import NAME_PATTERN

RETRY_BATCH = 500
MAX_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class JobRow:
    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    available_at: int
    reserved_by: str | None
    lease_expires_at: int | None
    created_at: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class QueueCounts:
    queue: str
    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    dead: int = 0
    oldest_ready_ms: int | None = None


@dataclass(frozen=True, slots=True)
class FailedRow:
    message_id: str
    queue: str
    job_name: str
    attempts: int
    exception_class: str
    failed_at: int


@dataclass(frozen=True, slots=True)
class FailedDetail:
    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    exception_class: str
    exception_message: str | None
    exception_trace: str | None
    failed_at: int


def check_message_id(value: str) -> str:
    if not is_message_id(value):
        raise InvalidMessageId(f"{value!r} is not a message id (a UUID like 0191...-...)")
    return value.lower()


def check_queue(value: str | None) -> str | None:
    if value is not None and not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(f"queue name {value!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
    return value


def check_limit(value: int) -> int:
    if not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be from 1 to {MAX_LIMIT}")
    return value


def _read(conn: Connection, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    """A read whose driver errors come back as ``DatabaseError`` (one line in the CLI)."""
    return conn.read(lambda c: c.execute(name, params), operation=f"queue {name.split('_')[-1]}")


def now_ms(conn: Connection) -> int:
    return int(_read(conn, "now_ms")[0][0])


def jobs(conn: Connection, *, queue: str | None = None, limit: int = 50) -> list[JobRow]:
    params = {"queue": check_queue(queue), "limit": check_limit(limit)}
    return [JobRow(*row) for row in _read(conn, "queue_admin_jobs", params)]


def stats(conn: Connection) -> list[QueueCounts]:
    """Counts per queue, as ``outbox status`` defines them; dead from the dead letters."""
    dead = {str(q): int(n) for q, n in _read(conn, "dead_counts")}
    out: dict[str, QueueCounts] = {}
    for queue, ready, delayed, reserved, oldest in _read(conn, "queue_counts"):
        out[queue] = QueueCounts(
            queue,
            int(ready or 0),
            int(delayed or 0),
            int(reserved or 0),
            dead.get(queue, 0),
            None if oldest is None else int(oldest),
        )
    for queue, n in dead.items():
        out.setdefault(queue, QueueCounts(queue, dead=n))
    return [out[q] for q in sorted(out)]


def failed(conn: Connection, *, limit: int = 50) -> list[FailedRow]:
    return [
        FailedRow(*row) for row in _read(conn, "queue_admin_failed", {"limit": check_limit(limit)})
    ]


def failed_job(conn: Connection, message_id: str) -> FailedDetail | None:
    rows = _read(conn, "queue_admin_failed_show", {"message_id": check_message_id(message_id)})
    return FailedDetail(*rows[0]) if rows else None


def retry(conn: Connection, message_id: str) -> int:
    """Requeue one dead letter (attempts reset to 0); return 1, or 0 if there is none."""
    ids = [check_message_id(message_id)]
    return conn.transact(lambda c: _requeue(c, ids), operation="queue retry")


def retry_all(conn: Connection) -> int:
    """Requeue every dead letter, in batches; return how many."""
    total = 0
    while True:
        moved = conn.transact(_requeue_next_batch, operation="queue retry")
        total += moved
        if moved < RETRY_BATCH:
            return total


def _requeue_next_batch(conn: Connection) -> int:
    ids = [str(r[0]) for r in conn.execute("queue_admin_failed_ids", {"limit": RETRY_BATCH})]
    return _requeue(conn, ids) if ids else 0


def _requeue(conn: Connection, ids: list[str]) -> int:
    inserted = conn.execute_count("queue_admin_requeue", {"ids": ids})
    conn.execute_count("queue_admin_failed_delete", {"ids": ids})
    return inserted


def forget(conn: Connection, message_id: str) -> int:
    """Delete one dead letter for good; return how many rows went (0 or 1)."""
    ids = [check_message_id(message_id)]
    return conn.transact(
        lambda c: c.execute_count("queue_admin_failed_delete", {"ids": ids}),
        operation="queue forget",
    )


def remove(conn: Connection, message_id: str) -> int:
    """Delete one job from the queue; return how many rows went (0 or 1)."""
    params = {"message_id": check_message_id(message_id)}
    return conn.transact(
        lambda c: c.execute_count("queue_admin_remove", params), operation="queue remove"
    )


def clear(conn: Connection, *, queue: str | None = None) -> int:
    """Delete every job no worker holds (of ``queue``, or all); return how many."""
    params = {"queue": check_queue(queue)}
    return conn.transact(
        lambda c: c.execute_count("queue_admin_clear", params), operation="queue clear"
    )
