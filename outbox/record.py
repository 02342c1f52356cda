"""record() / record_async(): a job intent written in the caller's own transaction.

The intent commits or rolls back with the caller's work because it is written on the
caller's connection; we never open one of our own. Inputs are validated before anything
is sent, so a bad key or job leaves the database untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox.config import settings
from outbox.db.adapters import adapt, adapt_async
from outbox.errors import IdempotencyConflict, RetryTransaction
from outbox.ids import new_message_id
from outbox.job import Job, availability_ms, fingerprint, key_digest, normalise
from outbox.steps import Steps, drive, drive_async


@dataclass(frozen=True, slots=True)
class Intent:
    """A validated intent, ready to insert."""

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
        normal = normalise(job)
        at_ms = availability_ms(available_at)
        return cls(
            message_id=new_message_id(),
            key_digest=key_digest(key),
            fingerprint=fingerprint(normal, at_ms),
            job_name=normal.name,
            queue=normal.queue,
            payload=normal.payload_json,
            max_attempts=normal.max_attempts,
            available_at=at_ms,
        )

    def params(self) -> dict[str, Any]:
        """The named parameters of ``record_insert``."""
        return {
            "message_id": self.message_id,
            "key_digest": self.key_digest,
            "fingerprint": self.fingerprint,
            "job_name": self.job_name,
            "queue": self.queue,
            "payload": self.payload,
            "max_attempts": self.max_attempts,
            "available_at": self.available_at,
        }


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
