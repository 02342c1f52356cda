"""record() / record_async(): a job intent written in the caller's own transaction.

The intent commits or rolls back with the caller's work because it is written on the
caller's connection; we never open one of our own. Inputs are validated before anything
is sent, so a bad key or job leaves the database untouched.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any, NamedTuple

import orjson

from outbox.config import settings
from outbox.db.adapters import adapt, adapt_async
from outbox.errors import IdempotencyConflict, InvalidJob, InvalidKey, RetryTransaction
from outbox.ids import new_message_id
from outbox.job import Job, availability_ms, fingerprint, key_digest, normalise
from outbox.steps import Row, Step, Steps, drive, drive_async

MAX_BATCH = 1_000


class Intent(NamedTuple):
    """A validated intent, ready to insert; as a tuple, one row of ``record_many_insert``.

    A named tuple, not a frozen dataclass: ``record_many`` builds up to 1,000 per call.
    """

    message_id: str
    key_digest: str
    fingerprint: str
    job_name: str
    queue: str
    payload: str
    max_attempts: int | None
    available_at: int | None

    @classmethod
    def build(cls, key: str, job: Job, available_at: Any) -> Intent:
        """Validate key, job and availability, and pick the new message id."""
        return cls.timed(key, job, availability_ms(available_at))

    @classmethod
    def timed(cls, key: str, job: Job, at_ms: int | None) -> Intent:
        """``build`` with the availability already checked (shared by a whole batch)."""
        normal = normalise(job)
        return cls(
            new_message_id(),
            key_digest(key),
            fingerprint(normal, at_ms),
            normal.name,
            normal.queue,
            normal.payload_json,
            normal.max_attempts,
            at_ms,
        )

    def params(self) -> dict[str, Any]:
        """The named parameters of ``record_insert``."""
        return self._asdict()


def record_steps(intent: Intent, *, returning: bool, notify: bool) -> Steps:
    """Insert unless the key exists; on a replay, same fingerprint → same id."""
    rows = yield ("record_insert_notify" if notify else "record_insert", intent.params())
    if returning and rows:
        return str(rows[0][0])
    found = yield ("record_lookup", {"key_digest": intent.key_digest})
    if not found:
        # Only under REPEATABLE READ / SERIALIZABLE on a database that does not raise a
        # serialisation failure itself: the winner's row is outside our snapshot.
        raise RetryTransaction(
            "record: the key was taken by a concurrent transaction this snapshot cannot "
            "see; roll the transaction back and run all of it again"
        )
    message_id, stored_fp = str(found[0][0]), found[0][1]
    if message_id == intent.message_id or stored_fp == intent.fingerprint:
        return message_id
    raise IdempotencyConflict(message_id)


def record(conn: Any, key: str, job: Job, *, available_at: Any = 0) -> str:
    """Record ``job`` under idempotency ``key`` in ``conn``'s transaction; return the message id.

    ``conn`` is a SQLAlchemy Connection or Session, a psycopg Connection, a
    ``sqlite3.Connection`` or a PyMySQL Connection. Raises ``InvalidKey``/``InvalidJob``
    for bad input (nothing written), ``NoActiveTransaction`` when the write would commit
    on its own, ``IdempotencyConflict`` when ``key`` holds another job, and
    ``RetryTransaction`` when the database aborted the caller's transaction.
    """
    intent = Intent.build(key, job, available_at)
    target = adapt(conn)
    d = target.dialect
    steps = record_steps(intent, returning=d.supports_returning, notify=_notify(d))
    return drive(steps, target, "record")


async def record_async(conn: Any, key: str, job: Job, *, available_at: Any = 0) -> str:
    """``record`` for SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection."""
    intent = Intent.build(key, job, available_at)
    target = await adapt_async(conn)
    d = target.dialect
    steps = record_steps(intent, returning=d.supports_returning, notify=_notify(d))
    return await drive_async(steps, target, "record")


def _notify(dialect: Any) -> bool:
    return bool(dialect.supports_listen and settings.notify)


# key digest -> (message id, fingerprint) of the row that holds the key
Held = dict[str, tuple[str, str]]
BatchSteps = Generator[Step, list[Row], Held]


def record_many(conn: Any, items: Iterable[tuple[str, Job]], *, available_at: Any = 0) -> list[str]:
    """Record many ``(key, job)`` pairs in ``conn``'s transaction; return their ids in order.

    One round trip inserts the whole batch, plus one lookup when some keys already
    existed (always on MariaDB, which cannot return the inserted rows). Each item means
    what ``record(conn, key, job, available_at=available_at)`` means: a key recorded with
    the same job returns its existing id, also when it repeats within ``items``; a key
    holding another job raises ``IdempotencyConflict`` (roll the transaction back).

    Every item is validated before anything is sent: a bad key or job raises
    ``InvalidKey``/``InvalidJob`` naming the item's index and nothing is written. At most
    1,000 items per call (``InvalidJob`` beyond: one statement must stay a bounded
    size); an empty ``items`` returns ``[]`` without touching the connection.
    ``NoActiveTransaction``, ``UnsupportedConnection`` and ``RetryTransaction`` as in
    ``record()``.
    """
    intents = build_batch(items, available_at)
    if not intents:
        return []
    target = adapt(conn)
    steps = record_many_steps(_unique(intents), notify=_notify(target.dialect))
    return resolve(intents, drive(steps, target, "record_many"))


async def record_many_async(
    conn: Any, items: Iterable[tuple[str, Job]], *, available_at: Any = 0
) -> list[str]:
    """``record_many`` for SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection."""
    intents = build_batch(items, available_at)
    if not intents:
        return []
    target = await adapt_async(conn)
    steps = record_many_steps(_unique(intents), notify=_notify(target.dialect))
    return resolve(intents, await drive_async(steps, target, "record_many"))


def build_batch(items: Iterable[tuple[str, Job]], available_at: Any) -> list[Intent]:
    """Every item validated, in order; an error names the failing item's index."""
    at_ms = availability_ms(available_at)
    intents: list[Intent] = []
    for index, item in enumerate(items):
        if index >= MAX_BATCH:
            raise InvalidJob(f"record_many takes at most {MAX_BATCH:,} items per call")
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidJob(f"item {index}: expected a (key, Job) pair, got {type(item).__name__}")
        try:
            intents.append(Intent.timed(item[0], item[1], at_ms))
        except (InvalidKey, InvalidJob) as exc:
            raise type(exc)(f"item {index}: {exc}") from None
    return intents


def _unique(intents: list[Intent]) -> list[Intent]:
    """The first intent of each key: a repeated key is written (or found) once."""
    first: dict[str, Intent] = {}
    for intent in intents:
        first.setdefault(intent.key_digest, intent)
    return list(first.values())


def record_many_steps(unique: list[Intent], *, notify: bool) -> BatchSteps:
    """Insert the keys that are new; look up the rows of those that were not."""
    name = "record_many_insert_notify" if notify else "record_many_insert"
    rows = yield (name, _rows(unique))
    fingerprints = {i.key_digest: i.fingerprint for i in unique}
    held: Held = {str(d): (str(m), fingerprints[str(d)]) for d, m in rows}
    missing = [i.key_digest for i in unique if i.key_digest not in held]
    if missing:
        found = yield ("record_many_lookup", {"key_digests": orjson.dumps(missing).decode()})
        held.update({str(d): (str(m), str(fp)) for d, m, fp in found})
    if any(d not in held for d in missing):
        # As in record_steps: a winner's row outside a REPEATABLE READ snapshot.
        raise RetryTransaction(
            "record_many: a key was taken by a concurrent transaction this snapshot cannot "
            "see; roll the transaction back and run all of it again"
        )
    return held


def resolve(intents: list[Intent], held: Held) -> list[str]:
    """Each item's id; an item whose key holds another job is a conflict."""
    out: list[str] = []
    for intent in intents:
        message_id, stored_fp = held[intent.key_digest]
        if stored_fp != intent.fingerprint:
            raise IdempotencyConflict(message_id)
        out.append(message_id)
    return out


def _rows(unique: list[Intent]) -> dict[str, str]:
    """The batch as one JSON array of rows: one parameter, read alike by every dialect."""
    return {"rows": orjson.dumps([tuple(i) for i in unique]).decode()}
