"""Encryption key status and rotation over the stored rows (``outbox keys``).

``rotate`` re-seals, under the keyring's current key, every stored text that is not
under it yet (plaintext written before encryption was on included): pending intents
(payload, and the fingerprint that covers it, in the intent and its key row), queued
jobs, dead letters (payload, message, trace), kept results and workflow nodes.

Online and resumable by construction:

- one short transaction per batch (``batch`` rows of one table), so producers and
  workers wait at most one batch on SQLite and never on PostgreSQL or MariaDB, where a
  batch locks its rows ``FOR UPDATE SKIP LOCKED`` and passes over any row someone else
  holds;
- batches walk each table by primary key, and rows under the current key drop out of
  the filter: a stopped rotation started again does only what is left, and a row passed
  over (locked, its key missing, tampered with, a quarantined intent) is counted as left
  for the next run.

A pending intent whose stored fingerprint does not verify is left alone: the relay
quarantines it as before, and re-sealing it must not make it verify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from outbox.db.connection import Connection
from outbox.db.driver import Row
from outbox.errors import ConfigurationError, MissingKey, TamperedPayload
from outbox.job import NormalJob, fingerprint, sealing

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# The tables ``keys_status`` counts, in its order.
TABLES = (
    "outbox_messages",
    "outbox_jobs",
    "outbox_failed_jobs",
    "outbox_job_results",
    "outbox_workflow_nodes",
)


def status(conn: Connection) -> dict[str, dict[str | None, int]]:
    """Rows per table and key id (``None``: plaintext); tables without rows are empty."""
    rows = conn.read(lambda c: c.execute("keys_status"), operation="keys status")
    out: dict[str, dict[str | None, int]] = {t: {} for t in TABLES}
    for table, key_id, count in rows:
        out[str(table)][None if key_id is None else str(key_id)] = int(count)
    return out


@dataclass(slots=True)
class Rotation:
    """What ``rotate`` did: rows re-sealed per table, and rows it had to leave (their key
    missing, tampered with, or locked by someone else: a later run tries again)."""

    key_id: str
    resealed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    missing_key: int = 0
    tampered: int = 0
    unverified: int = 0

    @property
    def total(self) -> int:
        return sum(self.resealed.values())


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    batch: str  # the statement that reads the next batch
    update: str  # the statement that writes one row back
    text_columns: tuple[str, ...]  # the row's sealed columns, after its key column
    string_key: bool = False  # keyed by a message/node id (text), not an integer id


_PLAIN_TABLES = (
    _Table("outbox_jobs", "keys_batch_jobs", "keys_reseal_job", ("payload",)),
    _Table(
        "outbox_failed_jobs",
        "keys_batch_dead",
        "keys_reseal_dead",
        ("payload", "exception_message", "exception_trace"),
    ),
    _Table(
        "outbox_job_results",
        "keys_batch_results",
        "keys_reseal_result",
        ("payload", "return_value", "exception_trace"),
        string_key=True,
    ),
    _Table("outbox_workflow_nodes", "keys_batch_nodes", "keys_reseal_node", ("payload",), True),
)


def rotate(
    conn: Connection,
    *,
    batch: int = DEFAULT_BATCH,
    on_batch: Callable[[str, int], None] | None = None,
) -> Rotation:
    """Re-seal every stored text under the keyring's current key (module docstring).
    ``on_batch(table, rows)`` is told after each committed batch (the CLI's progress)."""
    ring = sealing.active()
    if ring is None:
        raise ConfigurationError(
            f"encryption is off: set {sealing.ENV_KEYS} (or {sealing.ENV_HOOK}) to rotate"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ConfigurationError(f"batch must be an int from 1 to {MAX_BATCH} (got {batch!r})")
    done = Rotation(ring.current)
    current = _pattern(ring.current)
    _walk(
        conn,
        done,
        "outbox_messages",
        partial(_intents, ring, done, current, batch),
        on_batch,
    )
    for table in _PLAIN_TABLES:
        _walk(
            conn,
            done,
            table.name,
            partial(_rows, ring, done, table, current, batch),
            on_batch,
        )
    return done


def _pattern(key_id: str) -> str:
    """The LIKE pattern of a text under ``key_id`` (``!`` escapes LIKE's wildcards)."""
    prefix = f'{sealing.MARKER}"{sealing.VERSION}:{key_id}:'
    return prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def _walk(
    conn: Connection,
    done: Rotation,
    table: str,
    step: Callable[[Connection, Any], tuple[int, Any, bool]],
    on_batch: Callable[[str, int], None] | None,
) -> None:
    """Run ``step`` batch after batch, each in its own transaction, until one is short."""
    after: Any = None
    while True:
        written, after, more = conn.transact(partial(_flip, step, after), operation="keys rotate")
        done.resealed[table] += written
        if on_batch is not None and written:
            on_batch(table, written)
        if not more:
            return


def _flip(
    step: Callable[[Connection, Any], tuple[int, Any, bool]], after: Any, c: Connection
) -> tuple[int, Any, bool]:
    return step(c, after)


def _reseal(ring: sealing.Keyring, done: Rotation, text: str | None) -> str | None:
    """``text`` under the current key; ``None`` when it must be left as it is."""
    if text is None or sealing.key_id_of(text) == ring.current:
        return text
    try:
        return ring.seal(ring.open(text))
    except MissingKey:
        done.missing_key += 1
    except TamperedPayload:
        done.tampered += 1
    return None


def _intents(
    ring: sealing.Keyring,
    done: Rotation,
    current: str,
    batch: int,
    c: Connection,
    after: int | None,
) -> tuple[int, int | None, bool]:
    params = {"after": -1 if after is None else after, "current": current, "batch": batch}
    rows: list[Row] = c.execute("keys_batch_intents", params)
    written = 0
    for row in rows:
        row_id, message_id, digest, stored_fp, name, queue, payload = row[:7]
        attempts, available_at, priority, ordering = row[7:11]
        normal = NormalJob(str(name), str(queue), str(payload), attempts, int(priority), ordering)
        if fingerprint(normal, available_at) != stored_fp:
            done.unverified += 1  # the relay quarantines it; sealing must not repair it
            continue
        sealed = _reseal(ring, done, str(payload))
        if sealed is None or sealed == payload:
            continue
        new_fp = fingerprint(normal._replace(payload_json=sealed), available_at)
        c.execute("keys_reseal_intent", {"id": row_id, "payload": sealed, "fingerprint": new_fp})
        c.execute(
            "keys_reseal_key",
            {"fingerprint": new_fp, "key_digest": digest, "message_id": message_id},
        )
        written += 1
    last = int(rows[-1][0]) if rows else after
    return written, last, len(rows) == batch


def _rows(
    ring: sealing.Keyring,
    done: Rotation,
    table: _Table,
    current: str,
    batch: int,
    c: Connection,
    after: Any,
) -> tuple[int, Any, bool]:
    cursor = (
        {"after_id": "" if after is None else after}
        if table.string_key
        else {"after": -1 if after is None else after}
    )
    rows: list[Row] = c.execute(table.batch, {**cursor, "current": current, "batch": batch})
    written = 0
    for row in rows:
        texts = [None if v is None else str(v) for v in row[1:]]
        sealed = [_reseal(ring, done, t) for t in texts]
        if any(s is None and t is not None for s, t in zip(sealed, texts, strict=True)):
            continue  # one of its texts cannot be opened: the row is left whole
        if sealed == texts:
            continue
        c.execute(
            table.update, {"id": row[0], **dict(zip(table.text_columns, sealed, strict=True))}
        )
        written += 1
    last = rows[-1][0] if rows else after
    return written, last, len(rows) == batch
