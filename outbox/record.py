"""record() / record_async(): a job intent written in the caller's own transaction.

The intent commits or rolls back with the caller's work because it is written on the
caller's connection; we never open one of our own. Inputs are validated before anything
is sent, so a bad key or job leaves the database untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, NamedTuple, Protocol, runtime_checkable

from outbox.config import settings
from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import (
    IntentInsert,
    IntentsInsert,
    KeyHolder,
    intent_insert,
    intents_insert,
    run,
    run_async,
)
from outbox.db.dialect import Dialect
from outbox.errors import IdempotencyConflict, InvalidJob, InvalidKey, RetryTransaction
from outbox.ids import new_message_id, new_message_ids
from outbox.job import Job, NormalJob, availability_ms, fingerprint, key_digest, normalise, sealing


@runtime_checkable
class Recordable(Protocol):
    """What ``record()`` takes besides a ``Job``: an ``outbox.Workflow``, which writes
    itself (``outbox.workflows``; this module sits below it and never imports it)."""

    def record_into(self, conn: Any, key: str, *, available_at: Any = 0) -> str: ...

    async def record_into_async(self, conn: Any, key: str, *, available_at: Any = 0) -> str: ...

MAX_BATCH = 1_000
_new_tuple = tuple.__new__


def _untraced() -> str | None:
    return None


# The caller's span context in its stored form, or None. outbox.tracing sits a layer
# above this module (it also makes the worker's spans), so it plugs its capture in here
# when it loads, and `import outbox` always loads it (outbox/__init__.py imports it).
capture_trace: Callable[[], str | None] = _untraced


def capture_traces_with(capture: Callable[[], str | None]) -> None:
    """Plug in the span capture (``outbox.tracing`` does as it loads). A function, as
    ``outbox.record`` on the package is the function ``record``, not this module."""
    global capture_trace
    capture_trace = capture


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
    priority: int
    trace_context: str | None = None  # the caller's span (outbox.tracing), not fingerprinted
    ordering_key: str | None = None

    @classmethod
    def build(
        cls, key: str, job: Job, available_at: Any, trace_context: str | None = None
    ) -> Intent:
        """Validate key, job and availability, and pick the new message id."""
        return cls.timed(key, job, availability_ms(available_at), trace_context)

    @classmethod
    def timed(
        cls,
        key: str,
        job: Job,
        at_ms: int | None,
        trace_context: str | None = None,
        message_id: str | None = None,
    ) -> Intent:
        """``build`` with the availability already checked (shared by a whole batch), and
        the message id when the caller has picked it (``record_many`` picks a batch's at once)."""
        normal = normalise(job)
        name, queue, payload, attempts, priority, ordering_key = normal
        return _new_tuple(  # the named tuple's own __new__ is a Python frame: 0.3 us an intent
            cls,
            (
                message_id or new_message_id(),
                key_digest(key),
                fingerprint(normal, at_ms),
                name,
                queue,
                payload,
                attempts,
                at_ms,
                priority,
                trace_context,
                ordering_key,
            ),
        )

    def params(self) -> dict[str, Any]:
        """The named parameters of ``record_insert``."""
        return self._asdict()


def _holder_id(intent: Intent, holder: KeyHolder | None) -> str:
    """Our id, or the key holder's when it holds the same job; else a conflict."""
    if holder is None:
        # Only under REPEATABLE READ / SERIALIZABLE on a database that does not raise a
        # serialisation failure itself: the winner's row is outside our snapshot.
        raise RetryTransaction(
            "record: the key was taken by a concurrent transaction this snapshot cannot "
            "see; roll the transaction back and run all of it again"
        )
    if holder.message_id == intent.message_id or _same_job(intent, holder.fingerprint):
        return holder.message_id
    raise IdempotencyConflict(holder.message_id)


def _same_job(intent: Intent, held: str) -> bool:
    """Whether the key's stored fingerprint is this job's. With encryption on, a job
    recorded in plaintext before it was turned on, or sealed under an older key of the
    ring before a rotation, has another fingerprint: the job is sealed again under each
    (the conflict path only) and a match is a replay (``outbox.job.sealing``)."""
    if held == intent.fingerprint:
        return True
    if not intent.payload.startswith(sealing.MARKER):
        return False
    normal = NormalJob(intent.job_name, intent.queue, intent.payload, intent.max_attempts,
                       intent.priority, intent.ordering_key)
    return any(
        fingerprint(normal._replace(payload_json=text), intent.available_at) == held
        for text in sealing.replay_texts(intent.payload)
    )


def record(conn: Any, key: str, job: Job | Recordable, *, available_at: Any = 0) -> str:
    """Record ``job`` under idempotency ``key`` in ``conn``'s transaction; return the message id.

    ``job`` may be an ``outbox.Workflow``: every node is written in this transaction and
    the workflow id is returned (``outbox.workflows``).

    ``conn`` is a SQLAlchemy Connection or Session, a psycopg Connection, a
    ``sqlite3.Connection`` or a PyMySQL Connection. Raises ``InvalidKey``/``InvalidJob``
    for bad input (nothing written), ``NoActiveTransaction`` when the write would commit
    on its own, ``IdempotencyConflict`` when ``key`` holds another job, and
    ``RetryTransaction`` when the database aborted the caller's transaction.
    """
    if not isinstance(job, Job) and isinstance(job, Recordable):  # a Job pays one check
        return job.record_into(conn, key, available_at=available_at)
    intent = Intent.build(key, job, available_at, capture_trace())
    target = adapt(conn)
    d = target.dialect
    holder = run(intent_insert(IntentInsert(intent.params(), _notify(d)), d), target, "record")
    return _holder_id(intent, holder)


async def record_async(conn: Any, key: str, job: Job | Recordable, *, available_at: Any = 0) -> str:
    """``record`` for SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection."""
    if not isinstance(job, Job) and isinstance(job, Recordable):
        return await job.record_into_async(conn, key, available_at=available_at)
    intent = Intent.build(key, job, available_at, capture_trace())
    target = await adapt_async(conn)
    d = target.dialect
    plan = intent_insert(IntentInsert(intent.params(), _notify(d)), d)
    return _holder_id(intent, await run_async(plan, target, "record"))


def _notify(dialect: Dialect) -> bool:
    return bool(dialect.supports_listen and settings.notify)


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
    plan = _batch_plan(intents, target.dialect)
    return resolve(intents, run(plan, target, "record_many"))


async def record_many_async(
    conn: Any, items: Iterable[tuple[str, Job]], *, available_at: Any = 0
) -> list[str]:
    """``record_many`` for SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection."""
    intents = build_batch(items, available_at)
    if not intents:
        return []
    target = await adapt_async(conn)
    plan = _batch_plan(intents, target.dialect)
    return resolve(intents, await run_async(plan, target, "record_many"))


def build_batch(items: Iterable[tuple[str, Job]], available_at: Any) -> list[Intent]:
    """Every item validated, in order; an error names the failing item's index."""
    at_ms = availability_ms(available_at)
    trace_context = capture_trace()  # one caller, one span: the whole batch shares it
    pairs = list(islice(items, MAX_BATCH + 1))
    ids = new_message_ids(min(len(pairs), MAX_BATCH))
    timed = Intent.timed
    intents: list[Intent] = []
    for index, item in enumerate(pairs):
        if index >= MAX_BATCH:
            raise InvalidJob(f"record_many takes at most {MAX_BATCH:,} items per call")
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidJob(f"item {index}: expected a (key, Job) pair, got {type(item).__name__}")
        try:
            intents.append(timed(item[0], item[1], at_ms, trace_context, ids[index]))
        except (InvalidKey, InvalidJob) as exc:
            raise type(exc)(f"item {index}: {exc}") from None
    return intents


def _batch_plan(intents: list[Intent], dialect: Dialect) -> Any:
    """The first intent of each key is written (or found) once."""
    first: dict[str, Intent] = {}
    for intent in intents:
        first.setdefault(intent.key_digest, intent)
    unique = list(first.values())
    fingerprints = {i.key_digest: i.fingerprint for i in unique}
    return intents_insert(IntentsInsert(unique, _notify(dialect)), fingerprints, dialect)


def resolve(intents: list[Intent], held: dict[str, KeyHolder]) -> list[str]:
    """Each item's id; an item whose key holds another job is a conflict."""
    if any(i.key_digest not in held for i in intents):
        # As in record(): a winner's row outside a REPEATABLE READ snapshot.
        raise RetryTransaction(
            "record_many: a key was taken by a concurrent transaction this snapshot cannot "
            "see; roll the transaction back and run all of it again"
        )
    out: list[str] = []
    for intent in intents:
        holder = held[intent.key_digest]
        if not _same_job(intent, holder.fingerprint):
            raise IdempotencyConflict(holder.message_id)
        out.append(holder.message_id)
    return out
