"""``recorded`` and ``assert_recorded``: what a test's code recorded, read back from the
tables (intents not yet handed off, jobs in the queue, dead letters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox.db.adapters import adapt
from outbox.db.caller import jobs_recorded, run
from outbox.job import canonical_json, sealing


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()


@dataclass(frozen=True, slots=True)
class RecordedJob:
    """One job as stored. ``where`` is ``intent``, ``job`` or ``dead``; ``state`` is the
    intent's state (``pending``/``failed``), ``queued``/``retrying``, or ``dead``."""

    where: str
    message_id: str
    job_name: str
    queue: str
    payload: Any
    state: str


def recorded(
    conn: Any, name: str | None = None, payload: Any = ANY, *, queue: str | None = None
) -> list[RecordedJob]:
    """Every stored job matching ``name``, ``payload`` (compared as canonical JSON) and
    ``queue``; ``None``/``ANY`` match anything. Read on ``conn``, in its transaction."""
    rows = run(jobs_recorded(), adapt(conn), "recorded")
    wanted = None if payload is ANY else canonical_json(payload)
    out = []
    for row in rows:
        if name is not None and row.job_name != name:
            continue
        if queue is not None and row.queue != queue:
            continue
        text = row.payload
        if wanted is not None and (text is None or _canonical(text) != wanted):
            continue
        value = None if text is None else sealing.loads(text)
        out.append(
            RecordedJob(row.where, row.message_id, row.job_name, row.queue, value, row.state)
        )
    return out


def assert_recorded(
    conn: Any,
    name: str,
    payload: Any = ANY,
    *,
    queue: str | None = None,
    count: int | None = None,
) -> list[RecordedJob]:
    """Fail unless a job ``name`` (with ``payload``, on ``queue``) is stored — exactly
    ``count`` of them when given. Returns the matches."""
    found = recorded(conn, name, payload, queue=queue)
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    everything = recorded(conn)
    names = sorted({f"{r.job_name} ({r.where}, {r.state})" for r in everything}) or ["nothing"]
    wanted = f"{count if count is not None else 'a'} job(s) {name!r}"
    if payload is not ANY:
        wanted += f" with payload {payload!r}"
    if queue is not None:
        wanted += f" on queue {queue!r}"
    raise AssertionError(
        f"expected {wanted}; found {len(found)} matching. Stored: {', '.join(names)}"
    )


def _canonical(text: str) -> str:
    return canonical_json(sealing.loads(text))
