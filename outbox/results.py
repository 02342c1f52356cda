"""Job results: what a job whose handler keeps its result ended as, read back by id.

A handler registered with ``keep_result=`` (``True`` for ``DEFAULT_KEEP_S``, or a
number of seconds) has its outcome written in the same transaction that settles the
job: the acknowledgement writes ``SUCCESSFUL`` with the handler's return value as JSON
(at most ``MAX_RESULT_BYTES``; a value that cannot be stored fails the job permanently
with ``InvalidResult``, whose message says why), and the move to the dead letters writes
``FAILED`` with the exception's class and traceback (never its message, never the
payload). Jobs that keep no result write nothing more than before.

``get(db, message_id)`` reads one job's state: ``READY`` or ``RUNNING`` while it is in
the queue, then its kept result, or ``FAILED`` from its dead letter for a job that keeps
none; None when nothing is known (never recorded, or finished without keeping a result,
or pruned). ``outbox prune`` drops results past their retention (``prune``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from outbox.db.connection import Connection, Database
from outbox.db.rows import FAILED, SUCCESSFUL, Failure, StoredResult, without_messages
from outbox.errors import ConfigurationError, OutboxError
from outbox.ids import is_node_id
from outbox.job import sealing
from outbox.log import get_logger

READY = "READY"
RUNNING = "RUNNING"
MAX_RESULT_BYTES = 65_535  # the same bound as a payload: one TEXT column on every database
DEFAULT_KEEP_S = 7 * 86_400
MAX_KEEP_S = 10 * 365 * 86_400
PRUNE_BATCH = 1_000

__all__ = [
    "DEFAULT_KEEP_S",
    "FAILED",
    "MAX_RESULT_BYTES",
    "READY",
    "RUNNING",
    "SUCCESSFUL",
    "InvalidResult",
    "JobResult",
    "ResultError",
    "get",
    "prune",
]

log = get_logger("outbox.results")


class InvalidResult(OutboxError, ValueError):
    """A handler's return value cannot be kept: not JSON, or too large."""


def keep_ms(name: str, keep_result: object) -> int | None:
    """A handler's ``keep_result`` as milliseconds (None: keeps none), checked where the
    handler registers."""
    if keep_result is False or keep_result is None:
        return None
    if keep_result is True:
        return DEFAULT_KEEP_S * 1000
    if (
        isinstance(keep_result, (int, float))
        and not isinstance(keep_result, bool)
        and math.isfinite(keep_result)
        and 1 <= keep_result <= MAX_KEEP_S
    ):
        return round(keep_result * 1000)
    raise ConfigurationError(
        f"job {name!r}: keep_result must be True, False or the seconds to keep a result "
        f"(1 to {MAX_KEEP_S}), not {keep_result!r}"
    )


def kept_ms(keep_result_ms: int | None, message_id: str) -> int | None:
    """How long a job's result is kept: its handler's ``keep_result``, or
    ``DEFAULT_KEEP_S`` for a workflow node whose handler keeps none; None when it keeps
    none. A node's result is pruned only once its workflow is gone (``result_prune``),
    however short this is: its dependents read it (``ctx.results``)."""
    if keep_result_ms is None and is_node_id(message_id):
        return DEFAULT_KEEP_S * 1000
    return keep_result_ms


def encode(value: Any) -> str:
    """The return value as stored: JSON text of at most ``MAX_RESULT_BYTES``."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:
        raise InvalidResult(
            f"the handler's return value is not JSON-serialisable ({type(value).__name__}): "
            "return dicts, lists, strings, numbers, booleans or None"
        ) from exc
    if len(data) > MAX_RESULT_BYTES:
        raise InvalidResult(
            f"the handler's return value is {len(data):,} bytes of JSON; at most "
            f"{MAX_RESULT_BYTES:,} can be kept (store large results elsewhere and return "
            "a reference)"
        )
    return sealing.seal(data.decode())  # as a payload is: sealed when encryption is on


@dataclass(frozen=True, slots=True)
class ResultError:
    """One failure: the exception's class (``module.Name``) and traceback."""

    exception_class: str
    traceback: str


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's state and, once finished, its outcome. Times are aware UTC datetimes by
    the database's clock; ``payload`` and ``return_value`` are decoded JSON."""

    message_id: str
    job_name: str
    queue: str
    status: str
    payload: Any
    attempts: int
    enqueued_at: datetime | None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    return_value: Any = None
    worker_ids: list[str] = field(default_factory=list)
    errors: list[ResultError] = field(default_factory=list)


def _at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _from_stored(r: StoredResult) -> JobResult:
    errors = (
        [ResultError(r.exception_class or "", r.exception_trace or "")]
        if r.status == FAILED
        else []
    )
    return JobResult(
        message_id=r.message_id,
        job_name=r.job_name,
        queue=r.queue,
        status=r.status,
        payload=sealing.loads(r.payload),
        attempts=r.attempts,
        enqueued_at=_at(r.enqueued_at),
        started_at=_at(r.started_at),
        finished_at=_at(r.finished_at),
        return_value=None if r.return_value is None else sealing.loads(r.return_value),
        worker_ids=[r.worker_id] if r.worker_id else [],
        errors=errors,
    )


def read(conn: Connection, message_id: str) -> JobResult | None:
    """``get`` on one of our connections."""
    driver = conn.driver
    queued = driver.result_job_state(message_id)
    if queued is not None:
        held = queued.reserved_by is not None
        return JobResult(
            message_id=queued.message_id,
            job_name=queued.job_name,
            queue=queued.queue,
            status=RUNNING if held else READY,
            payload=sealing.loads(queued.payload),
            attempts=queued.attempts,
            enqueued_at=_at(queued.created_at),
            started_at=_at(queued.reserved_at) if held else None,
            worker_ids=[queued.reserved_by] if queued.reserved_by else [],
        )
    stored = driver.result_get(message_id)
    if stored is not None:
        return _from_stored(stored)
    dead = driver.dead_show(message_id)
    if dead is None:
        return None
    return JobResult(
        message_id=dead.message_id,
        job_name=dead.job_name,
        queue=dead.queue,
        status=FAILED,
        payload=None,  # a dead letter's payload is shown by `outbox queue failed` alone
        attempts=dead.attempts,
        enqueued_at=None,  # a dead letter does not keep it
        finished_at=_at(dead.failed_at),
        # the dead letter keeps the messages; a result shows its traceback without them
        errors=[ResultError(dead.exception_class, without_messages(
            Failure(dead.exception_class, "", dead.exception_trace)
        ) if dead.exception_trace else "")],
    )


def get(db: Database | Connection | str, message_id: str) -> JobResult | None:
    """The state of job ``message_id`` (``db``: a ``Database``, one of its connections,
    or a database URL); None when nothing is known of it."""
    if not isinstance(message_id, str) or not message_id:
        raise ValueError("message_id must be a non-empty string")
    if isinstance(db, Connection):
        return read(db, message_id)
    database = Database(db) if isinstance(db, str) else db
    with database.connect() as conn:
        return read(conn, message_id)


def prune(conn: Connection, *, batch: int = PRUNE_BATCH) -> int:
    """Delete every result past its retention, ``batch`` per short transaction."""
    deleted = 0
    while True:
        n = conn.driver.result_prune(batch)
        deleted += n
        if n < batch:
            break
    if deleted:
        log.info("prune.results", deleted=deleted)
    return deleted
