"""What the driver seam takes and gives: small frozen params and typed rows.

Services never read a row by position: each driver operation returns one of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar

from outbox.job import BLOCKED_OFFSET_MS


class _Row:
    """``==``, ``hash`` and ``repr`` of the frozen rows below, written once.

    They are what ``@dataclass`` would generate (the fields in order; equal only to a row
    of the same class; ``repr=False`` fields not shown). Generated, each row compiled
    three more functions at import: on Python 3.11 a third of this module's import, which
    every ``outbox`` command pays at start (5 ms of CPU, 13 ms on a loaded machine).
    """

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _values(self) == _values(other)

    def __hash__(self) -> int:
        return hash(_values(self))

    def __repr__(self) -> str:
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({', '.join(shown)})"


def _values(row: _Row) -> tuple[Any, ...]:
    return tuple(getattr(row, f.name) for f in fields(row) if f.compare)


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
    priority: int = 0
    # The recorded W3C Trace Context (outbox.tracing): the attempt span's parent.
    trace_context: str | None = None
    # The ordering key's digest (outbox.db.ordering), None for a job without one.
    ordering_key: str | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Failure(_Row):
    """What a dead letter keeps: the only place an exception message is stored."""

    exception_class: str
    message: str
    trace: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobClaim(_Row):
    """Hold up to ``limit`` due jobs of ``queue`` for ``worker``, leased ``lease_ms``."""

    queue: str
    limit: int
    worker: str
    lease_ms: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobFence(_Row):
    """Jobs ``worker`` holds, each at its attempt: every change to a held job is a
    compare-and-set on ``(id, holder, attempts)``."""

    worker: str
    jobs: Sequence[ClaimedJob]

    def params(self) -> dict[str, Any]:
        """The fence in the shapes each dialect reads: PostgreSQL unnests ``ids`` and
        ``attempts``; SQLite reads ``pairs`` as JSON; PyMySQL expands ``ids`` and
        ``pairs`` into ``IN`` lists. Unused keys are ignored."""
        return {
            "worker": self.worker,
            "ids": [j.id for j in self.jobs],
            "attempts": [j.attempts for j in self.jobs],
            "pairs": [(j.id, j.attempts) for j in self.jobs],
        }


def has_ordering_key(fence: JobFence) -> bool:
    """Has any job of ``fence`` an ordering key? (Keyless acknowledgements stay one
    statement: they pay nothing for ordering.)"""
    return any(j.ordering_key is not None for j in fence.jobs)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobRelease(_Row):
    """A failed attempt of ``job`` back to the queue after ``delay_ms``."""

    holder: str
    job: ClaimedJob
    delay_ms: int
    error: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobReleaseUnspent(_Row):
    """Held jobs back with their attempt refunded; ``delay_ms=0`` keeps their place."""

    fence: JobFence
    delay_ms: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobDeadLetter(_Row):
    """Move ``job``, held by ``holder``, to the dead letters with ``failure``."""

    holder: str
    job: ClaimedJob
    failure: Failure
    # The job's ordering key stays blocked by the dead letter (outbox.db.ordering).
    hold_key: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobSnooze(_Row):
    """``job``, held by ``holder``, back to the queue after ``delay_ms`` with its attempt
    given back, unless it was snoozed ``max_snoozes`` times already."""

    holder: str
    job: ClaimedJob
    delay_ms: int
    max_snoozes: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ExpiredJob(_Row):
    """A held job whose lease ran out (its worker died or stalled)."""

    id: int
    attempts: int
    max_attempts: int | None
    holder: str
    job_name: str


@dataclass(slots=True)
class ReapResult:
    """What one reap did: jobs back in the queue, jobs dead-lettered."""

    requeued: int = 0
    dead: int = 0
    unstuck: int = 0  # ordering keys whose next job got a turn no one had passed on


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class OutboxHandoff(_Row):
    """Hand off up to ``batch_size`` of the oldest pending intents to the SQL queue."""

    batch_size: int
    notify: bool = False
    verify_in_python: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class HandoffResult(_Row):
    """What one batch did. ``quarantined_ids`` pairs each failed message id with its reason."""

    claimed: int
    handed_off: int
    quarantined: int
    ms: float
    quarantined_ids: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # The recorded trace contexts of the intents handed off (the relay span's links).
    trace_contexts: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class StoredIntent(_Row):
    """The columns of one ``outbox_messages`` row that verification reads."""

    id: int
    message_id: str
    fingerprint: Any
    job_name: Any
    queue: Any
    payload: Any
    max_attempts: Any
    available_at: Any
    priority: Any = 0
    trace_context: str | None = None  # never verified: a malformed one is ignored
    ordering_key: Any = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class QueueCounts(_Row):
    """One queue's jobs: due and free, not yet due, leased to a worker, dead-lettered;
    and when the oldest ready job fell due (database milliseconds)."""

    queue: str
    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    dead: int = 0
    oldest_ready_ms: int | None = None
    paused: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IntentCounts(_Row):
    """Outbox rows by state, key rows, the oldest pending one's creation time and the
    clock."""

    by_state: dict[str, int]
    keys: int
    oldest_pending_ms: int | None
    now_ms: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JobRow(_Row):
    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    available_at: int
    reserved_by: str | None
    lease_expires_at: int | None
    created_at: int
    last_error: str | None
    priority: int = 0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FailedRow(_Row):
    message_id: str
    queue: str
    job_name: str
    attempts: int
    exception_class: str
    failed_at: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FailedDetail(_Row):
    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    exception_class: str
    exception_message: str | None
    exception_trace: str | None
    failed_at: int
    payload: str | None = None  # stored text: its size and key id are shown, never it


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FailedIntent(_Row):
    """One quarantined intent as ``outbox failed`` lists it: no payload, by design."""

    message_id: str
    reason: str | None
    created_at_ms: int
    failed_at_ms: int | None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RetryRow(_Row):
    """A quarantined candidate for ``outbox retry``: its state and what verification reads."""

    state: str
    intent: StoredIntent


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LimitScope(_Row):
    """One limit a job is under, by ``key`` (a digest naming job or queue and key value):
    at most ``concurrency`` running, or at most ``rate`` starts in any ``window_ms``."""

    key: str
    concurrency: int | None = None
    rate: int | None = None
    window_ms: int = 0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LimitAsk(_Row):
    """A claimed job that may start only within every one of ``scopes``."""

    job: ClaimedJob
    scopes: tuple[LimitScope, ...]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LimitAdmit(_Row):
    """Admit, in order, at most ``room`` of ``asks`` for ``holder``; their slots last
    ``lease_ms`` unless renewed. The rest are handed back unspent."""

    holder: str
    lease_ms: int
    room: int
    asks: Sequence[LimitAsk]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LimitVerdict(_Row):
    """``admitted``: start it now. Otherwise it went back to the queue unspent, due again
    in ``wait_ms`` (0: no room in this worker; another may take it at once)."""

    job: ClaimedJob
    admitted: bool
    wait_ms: int = 0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LimitSlot(_Row):
    """The concurrency slot ``job`` holds under ``key``."""

    key: str
    job: ClaimedJob


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DashboardCounts(_Row):
    """The dashboard's overview, each count capped at the cap asked for: intents pending
    and quarantined, the oldest pending one's creation and the clock (database
    milliseconds); per queue (ready, delayed, dead) and the jobs held per queue."""

    pending: int
    failed: int
    oldest_pending_ms: int | None
    now_ms: int
    queues: dict[str, tuple[int, int, int]]
    held: dict[str, int]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class DashboardJobs(_Row):
    """One page of ``queue``'s jobs in ``state`` (``ready``, ``delayed`` or
    ``reserved``), of ``job_name`` if given, after the cursor (``after_at``,
    ``after_id``) within ``priority`` (ready and delayed pages go one priority at a
    time), at most ``limit``."""

    state: str
    queue: str | None
    job_name: str | None
    after_at: int
    after_id: int
    priority: int
    limit: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ThroughputRow(_Row):
    """One worker's counts of one queue in one minute (``minute_ms``, database clock)."""

    minute_ms: int
    queue: str
    succeeded: int
    retried: int
    dead: int


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RecordedRow(_Row):
    """One stored job as ``outbox.testing`` sees it: ``where`` is ``intent``, ``job`` or
    ``dead``; ``payload`` the stored JSON text; ``state`` the intent's state,
    ``queued``/``retrying`` or ``dead``."""

    where: str
    message_id: str
    job_name: str
    queue: str
    payload: str | None
    state: str


# -- job results (outbox.results; their operations are outbox.db.results) ------------

SUCCESSFUL = "SUCCESSFUL"
FAILED = "FAILED"
MAX_TRACE_CHARS = 16_000  # a result's traceback is for reading, not a core dump


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class KeptResult(_Row):
    """What to write for one settled job: ``return_value`` (JSON text) when it
    succeeded, ``failure`` (only its class and trace are kept) when it failed."""

    job: ClaimedJob
    worker_id: str
    keep_ms: int
    ran_ms: int = 0
    return_value: str | None = None
    failure: Failure | None = None

    def params(self) -> dict[str, Any]:
        job, failure = self.job, self.failure
        return {
            "message_id": job.message_id,
            "queue": job.queue,
            "job_name": job.job_name,
            "status": FAILED if failure is not None else SUCCESSFUL,
            "payload": job.payload,
            "return_value": self.return_value,
            "attempts": job.attempts,
            "enqueued_at": job.created_at,
            "ran_ms": max(self.ran_ms, 0),
            "worker_id": self.worker_id,
            "exception_class": None if failure is None else failure.exception_class[:200],
            "exception_trace": None if failure is None else without_messages(failure),
            "keep_ms": self.keep_ms,
        }


_HEADERS = (
    "Traceback (most recent call last):",
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


def without_messages(failure: Failure) -> str:
    """The traceback with every exception's message left out (a message may quote the
    payload; only the dead letter keeps it): the frames and the chain's headers, then
    the exception's class."""
    kept = [
        line
        for line in failure.trace.splitlines()
        if line.startswith(" ") or line.strip() in _HEADERS or not line.strip()
    ]
    text = "\n".join(kept).rstrip() + "\n" + failure.exception_class
    return text[-MAX_TRACE_CHARS:]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class StoredResult(_Row):
    """One row of ``outbox_job_results`` (times in database milliseconds)."""

    message_id: str
    queue: str
    job_name: str
    status: str
    payload: str
    return_value: str | None
    attempts: int
    enqueued_at: int
    started_at: int | None
    finished_at: int
    worker_id: str | None
    exception_class: str | None
    exception_trace: str | None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class QueuedState(_Row):
    """A job still in the queue: held by ``reserved_by`` since ``reserved_at``, or waiting."""

    message_id: str
    queue: str
    job_name: str
    payload: str
    attempts: int
    created_at: int
    reserved_at: int | None
    reserved_by: str | None


def job_state(reserved_by: str | None, available_at: int, now_ms: int) -> str:
    """A queued job's state in the words the CLI and the dashboard show: ``reserved`` (a
    worker holds it), ``waiting`` (for its ordering key's turn), ``ready`` (due) or
    ``delayed`` (due later)."""
    if reserved_by:
        return "reserved"
    if waits_for_turn(available_at):
        return "waiting"
    return "ready" if available_at <= now_ms else "delayed"


def waits_for_turn(available_at: int) -> bool:
    """Does the job wait for its ordering key's turn? Its due time is then shifted by
    ``BLOCKED_OFFSET_MS``, past any real time (its turn shifts it back)."""
    return available_at >= BLOCKED_OFFSET_MS


def own_due_ms(available_at: int) -> int:
    """A job's own due time, without the shift of one waiting for its key's turn."""
    return available_at - BLOCKED_OFFSET_MS if waits_for_turn(available_at) else available_at
