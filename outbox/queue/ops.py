"""Queue operations over one of our ``Connection`` objects: the job state machine.

::

    ready ──claim──▶ held ──ack──▶ (deleted)
      ▲               │ ├──fail, attempts < max──▶ ready after backoff
      │               │ ├──fail at max / permanent──▶ outbox_failed_jobs
      │               │ └──release unspent (never started)──▶ ready, attempt given back
      └──reap (lease expired; attempt spent, at max ▶ outbox_failed_jobs)

A job is *held* exactly while ``reserved_by`` is set. Every change to a held job is a
compare-and-set on ``(id, reserved_by, attempts)``: a worker that lost its lease (reaped,
then claimed again, perhaps by itself) changes nothing, and is told so by the count of
rows it did change. Each operation is one short transaction through
``Connection.transact`` (the shared deadlock/BUSY retry policy); none is held open while
a handler runs. Batches are one statement: the hot path is one claim and one delete
per batch, whatever its size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from outbox.db import connection as _db
from outbox.db.connection import Connection, Row
from outbox.db.sql import queries

T = TypeVar("T")

LEASE_EXPIRED = "LeaseExpired"
REAP_BATCH = 200


@dataclass(slots=True)
class ClaimedJob:
    """One job as claimed: enough to run it and to fence every later change."""

    id: int
    message_id: str
    queue: str
    job_name: str
    payload: str
    attempts: int
    max_attempts: int | None
    created_at: int
    available_at: int


@dataclass(frozen=True, slots=True)
class Failure:
    """What a dead letter keeps: the only place an exception message is stored."""

    exception_class: str
    message: str
    trace: str


def atomic(conn: Connection, fn: Callable[[Connection], T], operation: str) -> T:
    """One statement under the shared retry policy (see ``Connection.atomic``)."""
    return conn.atomic(fn, operation=operation)


def now_ms(conn: Connection) -> int:
    """The database's clock, in milliseconds since the UNIX epoch."""
    return int(conn.read(lambda c: c.execute("now_ms"), operation="clock")[0][0])


def start_session(conn: Connection) -> None:
    """Session settings of a worker's own connection (see ``queue_worker_session``).

    Outside any transaction: SQLite refuses to change ``synchronous`` inside one.
    """
    try:
        conn.execute("queue_worker_session")
    except Exception as exc:
        raise _db.translate(exc, "connect") from exc


def claim(conn: Connection, queue: str, limit: int, worker: str, lease_ms: int) -> list[ClaimedJob]:
    """Hold up to ``limit`` due jobs of ``queue``, oldest due first; one round trip.

    Each claimed job has its attempt counted and a lease of ``lease_ms``.
    """
    params = {"queue": queue, "limit": limit, "worker": worker, "lease_ms": lease_ms}
    if conn.dialect.supports_returning:  # one statement: no transaction needed
        rows = atomic(conn, lambda c: _claim_rows(c, params), "claim")
    else:
        rows = conn.transact(lambda c: _claim_rows(c, params), operation="claim")
    return _jobs(rows)


def ack_and_claim(
    conn: Connection,
    worker: str,
    done: Sequence[ClaimedJob],
    queue: str,
    limit: int,
    lease_ms: int,
) -> tuple[set[int], list[ClaimedJob]]:
    """``ack(done)`` then ``claim(...)`` in one transaction: one statement where the
    dialect has one (``job_ack_claim``). Returns (acked ids, claimed jobs)."""
    if not done:
        return set(), claim(conn, queue, limit, worker, lease_ms)
    params = {**fence_params(worker, done), "queue": queue, "limit": limit, "lease_ms": lease_ms}
    if "job_ack_claim" in queries(conn.dialect):
        rows = atomic(conn, lambda c: c.execute("job_ack_claim", params), "claim")
        acked = {int(r[0]) for r in rows if r[1] is None}
        claimed = [r for r in rows if r[1] is not None]
    else:
        acked, claimed = conn.transact(lambda c: _ack_then_claim(c, params), operation="claim")
    return acked, _jobs(claimed)


def _jobs(rows: Sequence[Row]) -> list[ClaimedJob]:
    """Claimed rows as jobs, oldest due first (RETURNING gives no order)."""
    return sorted((ClaimedJob(*r) for r in rows), key=lambda j: (j.available_at, j.id))


def _ack_then_claim(conn: Connection, params: dict[str, Any]) -> tuple[set[int], list[Row]]:
    acked = {int(r[0]) for r in conn.execute("job_ack", params)}
    return acked, _claim_rows(conn, params)


def _claim_rows(conn: Connection, params: dict[str, Any]) -> list[Row]:
    if conn.dialect.supports_returning:
        return conn.execute("job_claim", params)
    return _claim_pick_then_mark(conn, params)


def _claim_pick_then_mark(conn: Connection, params: dict[str, Any]) -> list[Row]:
    picked = conn.execute("job_claim_pick", params)
    if not picked:
        return []
    now = picked[0][-1]
    ids = [row[0] for row in picked]
    conn.execute("job_claim_mark", {**params, "ids": ids, "now_ms": now})
    return [(*row[:5], row[5] + 1, *row[6:-1]) for row in picked]


def fence_params(worker: str, jobs: Sequence[ClaimedJob]) -> dict[str, Any]:
    """The holder and ``(id, attempts)`` of ``jobs``, in the shapes each dialect reads.

    PostgreSQL unnests ``ids``/``attempts`` arrays; SQLite reads ``pairs`` as JSON;
    PyMySQL expands ``ids`` and ``pairs`` into ``IN`` lists. Unused keys are ignored.
    """
    return {
        "worker": worker,
        "ids": [j.id for j in jobs],
        "attempts": [j.attempts for j in jobs],
        "pairs": [(j.id, j.attempts) for j in jobs],
    }


def ack(conn: Connection, worker: str, jobs: Sequence[ClaimedJob]) -> set[int]:
    """Delete finished jobs in one statement; return the ids this worker still held."""
    if not jobs:
        return set()
    params = fence_params(worker, jobs)
    rows = atomic(conn, lambda c: c.execute("job_ack", params), "ack")
    return {int(r[0]) for r in rows}


def ack_in_transaction(conn: Connection, worker: str, job: ClaimedJob) -> bool:
    """Delete one job inside the caller's open transaction (transactional handlers)."""
    return bool(conn.execute("job_ack", fence_params(worker, [job])))


def heartbeat(conn: Connection, worker: str, jobs: Sequence[ClaimedJob], lease_ms: int) -> int:
    """Renew the leases of ``jobs`` in one statement; return how many rows changed."""
    if not jobs:
        return 0
    params = {**fence_params(worker, jobs), "lease_ms": lease_ms}
    return atomic(conn, lambda c: c.execute_count("job_heartbeat", params), "heartbeat")


def release_unspent(
    conn: Connection,
    worker: str,
    jobs: Sequence[ClaimedJob],
    *,
    delay_ms: int = 0,
    error: str | None = None,
) -> int:
    """Give held jobs back with their attempt refunded; ``delay_ms=0`` keeps their place."""
    if not jobs:
        return 0
    params = {**fence_params(worker, jobs), "delay_ms": delay_ms, "error": error}
    return atomic(conn, lambda c: c.execute_count("job_release_unspent", params), "release")


def release(conn: Connection, worker: str, job: ClaimedJob, delay_ms: int, error: str) -> bool:
    """A failed attempt back to the queue after ``delay_ms``; False if the lease was lost."""
    params = {
        "id": job.id,
        "holder": worker,
        "attempts": job.attempts,
        "delay_ms": delay_ms,
        "error": error[:200],
    }
    return atomic(conn, lambda c: c.execute_count("job_release", params), "release") == 1


def dead_letter(conn: Connection, holder: str, job: ClaimedJob, failure: Failure) -> bool:
    """Move a held job to ``outbox_failed_jobs`` in one transaction; False if not held."""
    key = {"id": job.id, "holder": holder, "attempts": job.attempts}
    return conn.transact(
        lambda c: _move_to_failed(c, "job_dead_take", key, failure), operation="dead_letter"
    )


def _move_to_failed(conn: Connection, take: str, key: dict[str, Any], failure: Failure) -> bool:
    rows = conn.execute(take, key)
    if not rows:
        return False
    message_id, queue, job_name, payload, attempts, max_attempts = rows[0]
    conn.execute(
        "job_dead_insert",
        {
            "message_id": message_id,
            "queue": queue,
            "job_name": job_name,
            "payload": payload,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "exception_class": failure.exception_class[:200],
            "exception_message": failure.message,
            "exception_trace": failure.trace,
        },
    )
    return True


@dataclass(frozen=True, slots=True)
class Expired:
    id: int
    attempts: int
    max_attempts: int | None
    holder: str
    job_name: str


@dataclass(slots=True)
class ReapResult:
    requeued: int = 0
    dead: int = 0


def reap(conn: Connection, limit_for: Any, *, batch: int = REAP_BATCH) -> ReapResult:
    """Return expired leases to the queue; dead-letter those at their attempt limit.

    ``limit_for(job_name, row_max_attempts)`` gives the effective attempt limit. Each
    write re-checks holder, attempt and expiry, so a job acknowledged or renewed after
    the scan is never resurrected. One indexed read when nothing has expired.
    """
    result = ReapResult()
    rows = conn.read(lambda c: c.execute("job_reap_scan", {"limit": batch}), operation="reap")
    for row in rows:
        exp = Expired(int(row[0]), int(row[1]), row[2], str(row[3]), str(row[4]))
        if exp.attempts >= limit_for(exp.job_name, exp.max_attempts):
            result.dead += int(_reap_dead(conn, exp))
        else:
            result.requeued += _reap_release(conn, exp)
    return result


def _reap_key(exp: Expired) -> dict[str, Any]:
    return {"id": exp.id, "holder": exp.holder, "attempts": exp.attempts}


def _reap_dead(conn: Connection, exp: Expired) -> bool:
    failure = Failure(LEASE_EXPIRED, "the lease expired on the last attempt", "")
    key = _reap_key(exp)
    return conn.transact(
        lambda c: _move_to_failed(c, "job_reap_take", key, failure), operation="reap"
    )


def _reap_release(conn: Connection, exp: Expired) -> int:
    params = {**_reap_key(exp), "error": LEASE_EXPIRED}
    return atomic(conn, lambda c: c.execute_count("job_reap_release", params), "reap")
