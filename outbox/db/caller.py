"""The seam's half that runs on the *caller's* connection: ``record()`` and ``push()``.

These write inside the application's own transaction, on whatever connection kind it
holds (``outbox.db.adapters``), sync or async. Each operation is a plan: a generator
that yields ``(statement name, params)`` and receives the rows. ``run`` and
``run_async`` drive a plan on a connection, so one copy of the logic serves both, and
driver errors are translated here (a deadlock or busy database becomes
``RetryTransaction``: the caller's transaction is doomed).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import orjson

from outbox.db.adapters import AsyncTarget, Target
from outbox.db.dialect import Dialect
from outbox.db.driver import Executor, Row
from outbox.db.errors import translate_for_caller, translated
from outbox.db.rows import RecordedRow
from outbox.db.sql import queries
from outbox.errors import OutboxError

T = TypeVar("T")
Step = tuple[str, Mapping[str, Any]]
Plan = Generator[Step, list[Row], T]


class KeyHolder(NamedTuple):
    """The intent that holds an idempotency key: its message id and fingerprint (a named
    tuple: ``record_many`` reads up to 1,000 back, built through ``_holders``)."""

    message_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class IntentInsert:
    """One intent to insert unless its key exists (``record_insert``'s columns)."""

    row: Mapping[str, Any]
    notify: bool


@dataclass(frozen=True, slots=True)
class IntentsInsert:
    """Many intents (rows in ``record_many_insert``'s column order), one statement."""

    rows: Sequence[Sequence[Any]]
    notify: bool


@dataclass(frozen=True, slots=True)
class JobPush:
    """One job straight into the queue (``queue_push``'s columns)."""

    row: Mapping[str, Any]
    notify: bool


@dataclass(frozen=True, slots=True)
class JobsPush:
    """Many jobs straight into the queue (rows in ``queue_push_many``'s column order)."""

    rows: Sequence[Sequence[Any]]
    notify: bool


def intent_insert(p: IntentInsert, dialect: Dialect) -> Plan[KeyHolder | None]:
    """Insert the key row and the intent unless the key exists; the holder of the key
    (ours if inserted), or None when it is outside this transaction's snapshot.

    One statement where the dialect can insert in a WITH clause (PostgreSQL). Where an
    insert returns rows (SQLite; MariaDB 10.5+, whose ON DUPLICATE KEY UPDATE returns
    the existing row, so a replay learns its holder in that one statement), the key row
    first, then, only if that key row is its own, the intent as plain values. Elsewhere
    (MySQL 8) both, the intent guarded by its key row in SQL, then a lookup.
    """
    ours = KeyHolder(str(p.row["message_id"]), str(p.row["fingerprint"]))
    if dialect.supports_insert_cte:
        rows = yield ("record_insert_notify" if p.notify else "record_insert", p.row)
        if rows:
            return ours
    elif dialect.supports_returning:
        rows = yield ("record_insert_returning", p.row)
        if rows and str(rows[0][0]) == ours.message_id:
            yield ("record_insert_own_intent", p.row)
            return ours
        if rows:
            return KeyHolder(str(rows[0][0]), str(rows[0][1]))
    else:
        yield ("record_insert", p.row)
        yield ("record_insert_intent", p.row)
    found = yield ("record_lookup", {"key_digest": p.row["key_digest"]})
    if not found:
        return None
    return KeyHolder(str(found[0][0]), str(found[0][1]))


def intents_insert(
    p: IntentsInsert, fingerprints: Mapping[str, str], dialect: Dialect
) -> Plan[dict[str, KeyHolder]]:
    """Insert the keys that are new, with their intents; look up the holders of those
    that were not.

    ``fingerprints`` maps each key digest of the batch to its fingerprint. A key
    missing from the result is held outside this transaction's snapshot. As in
    ``intent_insert``: one statement on PostgreSQL; the key rows (returning every
    holder on MariaDB, the new ones on SQLite), then the intents; on MySQL 8 both and
    a lookup of every key.
    """
    batch = {"rows": orjson.dumps([tuple(r) for r in p.rows]).decode()}
    rows: list[Row] = []
    if dialect.supports_insert_cte:
        rows = yield ("record_many_insert_notify" if p.notify else "record_many_insert", batch)
    elif dialect.supports_returning:
        rows = yield ("record_many_insert_returning", batch)
        yield ("record_many_insert_intents", batch)
    else:
        yield ("record_many_insert", batch)
        yield ("record_many_insert_intents", batch)
    held = _holders(rows)
    missing = [d for d in fingerprints if d not in held]
    if missing:
        found = yield ("record_many_lookup", {"key_digests": orjson.dumps(missing).decode()})
        held.update(_holders(found))
    return held


def _holders(rows: list[Row]) -> dict[str, KeyHolder]:
    """``(key_digest, message_id, fingerprint)`` rows by key digest (``tuple.__new__``:
    the named tuple's own ``__new__`` is a Python frame per row)."""
    new = tuple.__new__
    return {str(d): new(KeyHolder, (str(m), str(fp))) for d, m, fp in rows}


def keys_held(key_digests: Sequence[str]) -> Plan[dict[str, KeyHolder]]:
    """The holders of those of ``key_digests`` that are recorded (``emit`` replays only
    the listeners its first emit recorded)."""
    rows = yield ("record_many_lookup", {"key_digests": orjson.dumps(list(key_digests)).decode()})
    return _holders(rows)


def job_push(p: JobPush) -> Plan[str]:
    """One job straight into the queue; its message id (chosen by the caller)."""
    yield ("queue_push_notify" if p.notify else "queue_push", p.row)
    return str(p.row["message_id"])


def jobs_push(p: JobsPush) -> Plan[list[str]]:
    """Many jobs straight into the queue, one statement; their message ids in order."""
    name = "queue_push_many_notify" if p.notify else "queue_push_many"
    yield (name, {"rows": orjson.dumps(p.rows).decode()})
    return [str(r[0]) for r in p.rows]


def jobs_recorded() -> Plan[list[RecordedRow]]:
    """Every intent, queued job and dead letter, as ``outbox.testing.recorded`` reads
    them back in the test's transaction."""
    rows = yield ("testing_recorded", {})
    return [
        RecordedRow(str(w), str(m), str(j), str(q), None if p is None else str(p), str(st))
        for w, m, j, q, p, st in rows
    ]


def harness_step(name: str, params: Mapping[str, Any]) -> Plan[list[Row]]:
    """One step of ``run_pending``, which folds the relay and the worker into the test's
    transaction statement by statement: ``name`` is one of ``testing.sql``'s statements
    (or the clock, ``now_ms``), and nothing else."""
    if not name.startswith("testing_") and name != "now_ms":
        raise ValueError(f"{name!r} is not a statement of outbox.testing")
    return (yield (name, params))


def run(plan: Plan[T], target: Target, operation: str) -> T:
    """Drive ``plan`` on a sync caller connection.

    Driver errors are translated as ``translated`` does, in a plain ``try``: the
    context manager's generator cost ~2 us per statement, a tenth of ``record()``'s own
    Python time.
    """
    sql = queries(target.dialect)
    execute = target.run
    try:
        name, params = next(plan)
        while True:
            try:
                rows = execute(sql[name], params)
            except OutboxError:
                raise
            except Exception as exc:
                raise translate_for_caller(exc, operation) from exc
            name, params = plan.send(rows)
    except StopIteration as done:
        value: T = done.value
        return value


async def run_async(plan: Plan[T], target: AsyncTarget, operation: str) -> T:
    """Drive ``plan`` on an async caller connection."""
    sql = queries(target.dialect)
    try:
        name, params = next(plan)
        while True:
            with translated(operation, caller=True):
                rows = await target.run(sql[name], params)
            name, params = plan.send(rows)
    except StopIteration as done:
        value: T = done.value
        return value


def drive(plan: Plan[T], c: Executor) -> T:
    """Run ``plan`` on one of our connections, inside the transaction it has open."""
    try:
        name, params = next(plan)
        while True:
            rows: list[Row] = c.execute(name, params)
            name, params = plan.send(rows)
    except StopIteration as done:
        value: T = done.value
        return value
