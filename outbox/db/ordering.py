"""Ordering keys in the queue table: the jobs of one key run one at a time, in order.

A job with an ordering key enters the queue either *in its turn* (no other job of its
key is in the queue) or *waiting*: its ``available_at`` is shifted by
``outbox.job.BLOCKED_OFFSET_MS``, past any real due time, so the claim statement, its
index and its plan are the same as for a job without a key. When a job of the key
leaves the queue (acknowledged, dead-lettered, cancelled, removed), the same
transaction gives the turn to the key's waiting job with the lowest id: ids follow the
order the jobs entered, which is record order within a transaction and commit order
across them (both pass through the key's row lock below, one after the other).

State of one key's jobs::

    enter ──(no job of the key)──▶ in its turn ──claim──▶ running ──ack/dead/cancel──▶ gone
      │                              ▲   ▲                  │                              │
      └──(another job of the key)──▶ waiting                └──retry/backoff/snooze/lease──┘
                                         └──────────── next in id order ◀───────────────────┘

A retry, a backoff wait, a snooze or an expired lease keeps the job in the queue, in
its turn, so the line holds: nothing later in the key can run until it ends.

Entering and leaving both start by locking the key's row in ``outbox_ordering_keys``
(an upsert), so they serialise per key on every database: a job entering while the
last one leaves either sees it gone (and runs at once) or waits and is promoted by it.
SQLite has one writer anyway. Locks are taken in sorted key order within a batch.

Each step is a fixed number of statements per batch, whatever its keys (a round trip
each on a server): entering is the lock and one read; leaving is the lock, one
promotion and one drop. The read after the lock cannot join it in one statement on
PostgreSQL: a statement reads one snapshot, taken before it waited for a lock, so it
would miss the transaction that held the lock. Two steps do without that read:

- A key row exists exactly while its key has a job in the queue or a dead letter
  holding it (the lock creates it, a leave drops it once the key has nothing, under
  the lock; an acknowledgement or dead letter that finds its job gone still drops the
  row its lock created). So a relay batch's keys whose rows the lock itself *creates*
  have no line: their first job runs (``enter_created`` on SQLite; inside
  ``relay_handoff``'s one statement on PostgreSQL, where the insert meets the row's
  latest version whatever the snapshot). A row that outlived its jobs (code of a
  previous version) only makes the key's job wait for the reaper's heal.
- On PostgreSQL an acknowledgement is the lock and one statement after it
  (``ordering_ack_leave``: the delete, the promotion and the drop, in a snapshot taken
  after the lock).

Every step of the line is a plan (``outbox.db.caller``): the same steps run on the
caller's connection (``push``, ``outbox.testing``) or on one of ours (``drive``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from outbox.db.caller import Plan, drive
from outbox.db.driver import Executor


def lock(keys: Iterable[str]) -> Plan[None]:
    """Lock each key's row, in sorted order (two batches never wait on each other in a
    circle), creating the rows that do not exist: one statement for the batch."""
    distinct = sorted(set(keys))
    if distinct:
        yield ("ordering_lock", _keys(distinct))


def _keys(distinct: list[str]) -> dict[str, Any]:
    """A batch's keys as the ordering statements take them: a list (``:keys``), and a
    JSON array for MariaDB's multi-row insert (``:keys_json``, read by JSON_TABLE)."""
    return {"keys": distinct, "keys_json": orjson.dumps(distinct).decode()}


def enter(keys: Sequence[str | None]) -> Plan[list[bool]]:
    """Lock the keys of jobs about to enter the queue, in sorted order; for each, whether
    it must wait (True) or runs in its turn. Run *before* the jobs are inserted: the
    first job of a key with no job in the queue runs, every other one waits. Two
    statements for the batch, whatever its keys: the lock, then one read of which keys
    have a job (a statement of its own, so that it sees what the lock waited for)."""
    distinct = sorted({k for k in keys if k is not None})
    if not distinct:
        return [False] * len(keys)
    yield from lock(distinct)
    busy = yield ("ordering_any_job", _keys(distinct))
    return _waits(keys, set(distinct) - {str(r[0]) for r in busy})


def enter_created(keys: Sequence[str]) -> Plan[list[bool]]:
    """``enter`` in one statement, where the key rows answer: a key row exists while the
    key has a job in the queue or a dead letter holding it (``lock`` creates it, ``leave``
    drops it when the key has nothing left), so the keys whose rows this statement
    *created* have no line. A row that outlived its key's jobs only makes the job wait
    for the reaper's heal. The relay's entry on SQLite (``ordering_lock_created``; one
    writer: no other transaction's row to miss), and the rule PostgreSQL's
    ``relay_handoff`` follows inside its one statement."""
    distinct = sorted(set(keys))
    if not distinct:
        return [False] * len(keys)
    created = yield ("ordering_lock_created", _keys(distinct))
    return _waits(keys, {str(r[0]) for r in created})


def _waits(keys: Sequence[str | None], free: set[str]) -> list[bool]:
    """For each job of ``keys`` in order: must it wait (True)? The first job of each key
    in ``free`` runs; every other keyed job waits."""
    waits: list[bool] = []
    for job_key in keys:
        if job_key is not None and job_key not in free:
            waits.append(True)
            continue
        if job_key is not None:
            free.discard(job_key)
        waits.append(False)
    return waits


def block(message_ids: Iterable[str]) -> Plan[None]:
    """The jobs ``enter`` said must wait (just inserted) wait for their turn."""
    for message_id in message_ids:
        yield ("ordering_block", {"message_id": message_id})


def leave(keys: Iterable[str | None], *, locked: bool = False) -> Plan[None]:
    """After jobs of ``keys`` left the queue in this transaction: give each key's turn
    to its next waiting job, or drop the key's row when it has none; a key with a job in
    its turn (a requeued dead letter) or a dead letter that holds it keeps its line.
    Locks the rows first, unless the caller did (``locked``). At most two statements
    for the batch (promote, drop), whatever its keys, plus the lock; the drop only when
    some key got no turn (its last job left)."""
    distinct = sorted({k for k in keys if k is not None})
    if not distinct:
        return
    if not locked:
        yield from lock(distinct)
    promoted = yield ("ordering_promote_free", _keys(distinct))
    # A key given a turn has a job, so its row stays: the drop checks the others only
    # (all of them on MariaDB, whose UPDATE cannot return the keys it promoted).
    rest = sorted(set(distinct) - {str(r[0]) for r in promoted or ()})
    if rest:
        yield ("ordering_drop_free", _keys(rest))


def handoff_ordered(
    c: Executor, rows: Sequence[tuple[int, str]], *, one_writer: bool = False
) -> tuple[list[int], list[int]]:
    """The relay's verified keyed intents ``(outbox id, key)``, in id order: which move
    now, and which of those must wait for their turn in the queue.

    An intent whose key has an older pending intent outside this batch (a second relay
    holds it, or it was deferred) stays in the outbox for a later batch, with its key's
    later intents: one key's intents enter the queue in id order whatever the relays do.
    With ``one_writer`` (SQLite) there is none: the batch is the oldest pending rows,
    read under the database's only write lock, so every row moves, and the keys enter
    in one statement (``enter_created``).
    """
    if one_writer:
        return [i for i, _ in rows], [i for (i, _), w in zip(
            rows, drive(enter_created([k for _, k in rows]), c), strict=True) if w]
    moving = in_turn(c, rows)
    waits = drive(enter([k for _, k in moving]), c)
    return [i for i, _ in moving], [i for (i, _), w in zip(moving, waits, strict=True) if w]


def in_turn(c: Executor, rows: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """Of a relay batch's keyed intents ``(outbox id, key)`` in id order, those whose
    turn to leave the outbox has come: no older pending intent of their key is outside
    the batch. One held by another lane or relay is still pending to this plain read
    (its batch has not committed), so a key never leaves in two batches at once: the
    SQL queue and the JetStream target both hand off through here."""
    ids = [i for i, _ in rows]
    keys = sorted({k for _, k in rows})
    found = c.execute("relay_ordering_earlier", {"ids": ids, "keys": keys, "max_id": max(ids)})
    earlier = {str(k): int(m) for k, m in found}
    return [(i, k) for i, k in rows if k not in earlier or i < earlier[k]]


def keys_of(rows: Iterable[Any]) -> list[str]:
    """The ordering keys (the first column) of ``rows`` that have one."""
    return [str(r[0]) for r in rows if r[0] is not None]
