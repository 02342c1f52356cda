"""One batch of the handoff: committed intents → queue rows, in one short transaction.

The life of an intent::

    record() ──► pending ──relay──► published   (payload cleared; a queue row exists)
                    │  ▲
                    │  └──── outbox retry ────┐
                    └──relay──► failed ───────┘  (quarantined with a reason code)

A batch claims the oldest pending rows *by state*, under row locks (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL and MariaDB; SQLite's ``BEGIN IMMEDIATE`` writer lock), never
"rows above the highest id seen": ids are assigned at insert but become visible at
commit, so a high-water mark would skip a long transaction's rows.

Rows stay in the database. Each dialect verifies them in SQL, then the valid ones are
copied with one INSERT … SELECT and every claimed row is marked with one UPDATE (one
more per distinct reason when rows are quarantined). PostgreSQL does all of it in a
single statement (``relay_handoff``). Python re-verification (``verify.reason_for``) is
the fallback when SQL cannot answer, and an option.

The queue's unique ``message_id`` is the last line of defence: a second handoff of the
same message fails the batch loudly and rolls it back; nothing is ever skipped quietly.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import structlog

from outbox.db.connection import Connection
from outbox.db.sql import queries
from outbox.errors import DatabaseError, OutboxError
from outbox.relay.verify import StoredIntent, reason_for

log = structlog.get_logger("outbox.relay")

# PostgreSQL's SQLSTATE when the ::json cast in relay_handoff meets a non-JSON payload.
_INVALID_TEXT_REPRESENTATION = "22P02"


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch did. ``quarantined_ids`` pairs each failed message id with its reason."""

    claimed: int
    handed_off: int
    quarantined: int
    ms: float
    quarantined_ids: tuple[tuple[str, str], ...] = field(default=(), repr=False)


# (claimed, handed off, ((message id, reason), ...) for the quarantined)
_Outcome = tuple[int, int, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class _Claimed:
    id: int
    message_id: str
    reason: str | None


class _NeedsPythonVerify(OutboxError):
    """The one-statement batch met a payload its SQL cannot check; it was rolled back."""


def handoff(
    conn: Connection, batch_size: int, *, notify: bool, verify_in_python: bool = False
) -> BatchResult:
    """Hand off up to ``batch_size`` of the oldest pending intents; one transaction.

    ``notify`` (PostgreSQL) wakes idle workers at commit. Deadlocks and BUSY are retried
    by ``Connection.transact``; anything else raises ``DatabaseError`` with the batch
    rolled back.
    """
    started = time.perf_counter()
    notify = notify and conn.dialect.supports_listen
    one_statement = "relay_handoff" in queries(conn.dialect)
    result: _Outcome
    if one_statement and not verify_in_python:
        try:
            result = conn.transact(
                lambda c: _in_one_statement(c, batch_size, notify), operation="relay batch"
            )
        except _NeedsPythonVerify:
            log.info("relay.verify_fallback", cause="payload_not_json")
            verify_in_python = True
    if not one_statement or verify_in_python:
        result = conn.transact(
            lambda c: _in_steps(c, batch_size, notify, verify_in_python), operation="relay batch"
        )
    claimed, handed_off, failed = result
    return BatchResult(
        claimed=claimed,
        handed_off=handed_off,
        quarantined=len(failed),
        ms=round((time.perf_counter() - started) * 1000, 2),
        quarantined_ids=failed,
    )


def _in_one_statement(conn: Connection, batch_size: int, notify: bool) -> _Outcome:
    try:
        rows = conn.execute("relay_handoff", {"batch_size": batch_size, "notify": notify})
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == _INVALID_TEXT_REPRESENTATION:
            raise _NeedsPythonVerify() from exc
        raise
    claimed, handed_off, failed_ids, reasons, _woken = rows[0]
    failed = tuple(zip(failed_ids or (), reasons or (), strict=True))
    return int(claimed), int(handed_off), failed


def _in_steps(conn: Connection, batch_size: int, notify: bool, verify_in_python: bool) -> _Outcome:
    claimed = _claim_python(conn, batch_size) if verify_in_python else _claim(conn, batch_size)
    valid = [c.id for c in claimed if c.reason is None]
    if valid:
        _expect(conn, "relay_insert_jobs", valid)
        _expect(conn, "relay_mark_published", valid)
        if notify:
            conn.execute("relay_notify")
    by_reason: dict[str, list[int]] = defaultdict(list)
    for c in claimed:
        if c.reason is not None:
            by_reason[c.reason].append(c.id)
    for reason, ids in by_reason.items():
        _expect(conn, "relay_mark_failed", ids, reason=reason)
    failed = tuple((c.message_id, c.reason) for c in claimed if c.reason is not None)
    return len(claimed), len(valid), failed


def _claim(conn: Connection, batch_size: int) -> list[_Claimed]:
    rows = conn.execute("relay_claim", {"batch_size": batch_size})
    return [_Claimed(int(r[0]), str(r[1]), r[2]) for r in rows]


def _claim_python(conn: Connection, batch_size: int) -> list[_Claimed]:
    rows = conn.execute("relay_claim_rows", {"batch_size": batch_size})
    intents = [StoredIntent.from_row(r) for r in rows]
    return [_Claimed(int(i.id), str(i.message_id), reason_for(i)) for i in intents]


def _expect(conn: Connection, name: str, ids: list[int], **params: Any) -> None:
    """Run ``name`` over ``ids`` and insist it touched every one of them.

    The rows are locked by this transaction, so a shortfall means a broken invariant
    (a state changed under our lock); the batch is rolled back rather than half applied.
    """
    changed = conn.execute_count(name, {"ids": ids, **params})
    if changed != len(ids):
        raise DatabaseError(
            f"relay batch aborted: {name} changed {changed} of {len(ids)} claimed rows"
        )
