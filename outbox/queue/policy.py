"""What happens after an attempt: the one settle policy of every path.

The SQL worker, the JetStream worker and ``outbox.testing`` run a handler, turn what
happened into an ``Outcome`` (``outbox.queue.execute``) and ask ``decide`` what to do
with it; each then writes the answer its own way (a compare-and-set on the queue row,
an ack/NAK on the message, a row in the test's transaction). The decision is made here
only, so one job meets one policy wherever it runs. The rows, in the order they are
tried (the README shows the same table)::

    the attempt …                                   decision
    an operator cancelled the job while it ran      CANCEL: dead letter, class ``cancelled``
    returned (or committed, transactional)          ACK
    was never started (stop, pause, stall)          RELEASE: back, attempt given back
    lost its lease before its commit                LOST: nothing to write
    raised Snooze(s), s in 0..MAX_SNOOZE_SECONDS    SNOOZE after s: attempt given back
    … its MAX_SNOOZES-th snooze already spent       DEAD, class ``SnoozeLimit``
    … s out of range                                a failure (``InvalidJob``): as below
    raised PermanentFailure (or the call failed)    DEAD, the exception's class
    failed, attempts spent = max_attempts           DEAD, the exception's class
    failed, attempts left                           RETRY after the handler's backoff

The retry's delay is the handler's ``backoff.delay_ms(attempt)`` (``bound`` when
``jitter=False``, as ``outbox.testing`` asks for repeatable tests). A backoff that
raises, or returns no finite number >= 0, gets the default backoff (with its own jitter
setting) instead: a bad backoff never stops a worker. A job with no handler here waits
``UNKNOWN_DELAY_MS``. A job still running when its worker's grace runs out is decided
apart (``decide_stopped``): RETRY at once, or DEAD after its last attempt, class
``WorkerStopped``.

``decide`` reads nothing but its arguments: no clock but ``now_ms``, no database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from outbox.db.driver import CANCELLED_FAILURE
from outbox.db.rows import Failure
from outbox.queue.backoff import DEFAULT_BACKOFF, Backoff
from outbox.queue.control import MAX_SNOOZES, SNOOZE_LIMIT, snooze_delay_ms
from outbox.queue.execute import Kind, Outcome, failure_of

UNKNOWN_DELAY_MS = 60_000
UNKNOWN_FAILURE = Failure("outbox.Unknown", "the attempt failed without an exception", "")
SNOOZE_LIMIT_FAILURE = Failure(
    SNOOZE_LIMIT, f"the job was snoozed {MAX_SNOOZES} times, the most a job may be", ""
)
WORKER_STOPPED = "WorkerStopped"
STOPPED_FAILURE = Failure(
    WORKER_STOPPED, "the worker stopped (its grace ran out) while this attempt ran", ""
)


class Action(StrEnum):
    """What follows an attempt: the ``action`` of a ``Decision``, one row of the module's table."""

    ACK = "ack"
    RETRY = "retry"
    DEAD = "dead"
    SNOOZE = "snooze"
    CANCEL = "cancel"
    RELEASE = "release"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one job after an attempt.

    ``delay_ms`` and ``due_ms`` (``now_ms + delay_ms``) are set for RETRY and SNOOZE;
    ``failure`` for DEAD (what the dead letter keeps), RETRY (the class recorded as the
    job's last error) and CANCEL.
    """

    action: Action
    delay_ms: int = 0
    due_ms: int = 0
    failure: Failure | None = None

    @property
    def error(self) -> str | None:
        """The exception class the decision records, if any."""
        return None if self.failure is None else self.failure.exception_class


_ACK = Decision(Action.ACK)
_RELEASE = Decision(Action.RELEASE)
_LOST = Decision(Action.LOST)
_CANCEL = Decision(Action.CANCEL, failure=CANCELLED_FAILURE)
# Kind's members, read once: ``decide_by_kind`` runs for every job, and on Python 3.11
# each ``Kind.X`` read calls ``EnumType.__getattr__`` (~70 ns), so it compares with these.
_KIND_DONE, _KIND_ACKED, _KIND_UNSTARTED, _KIND_LOST, _KIND_CANCELLED = (
    Kind.DONE, Kind.ACKED, Kind.UNSTARTED, Kind.LOST, Kind.CANCELLED
)


def decide_by_kind(kind: Kind, cancelled: bool = False) -> Decision | None:
    """The decision of the table's rows that need nothing but the outcome's kind and
    ``cancelled`` (CANCEL, ACK, RELEASE, LOST); None for a snooze or a failure, which
    ``decide`` weighs against the job's limit, snoozes and backoff.

    ``decide`` asks it first, and a worker may ask it before looking the job's handler
    up: a plain success, nearly every job, then costs no lookup and no keyword call.
    """
    if kind is _KIND_CANCELLED or (
        cancelled and kind is not _KIND_UNSTARTED and kind is not _KIND_ACKED
    ):
        return _CANCEL
    if kind is _KIND_DONE or kind is _KIND_ACKED:
        return _ACK  # made once, not one object per job
    if kind is _KIND_UNSTARTED:
        return _RELEASE
    if kind is _KIND_LOST:
        return _LOST
    return None


def decide(
    outcome: Outcome,
    *,
    max_attempts: int,
    backoff: Backoff | None,
    now_ms: int,
    cancelled: bool = False,
    snoozes: int = 0,
    jitter: bool = True,
) -> Decision:
    """The decision for ``outcome`` (see the module's table).

    ``max_attempts`` is the job's limit (recorded, else its handler's); ``backoff`` its
    handler's (None: no handler here); ``cancelled``: an operator cancelled the job
    while this worker held it; ``snoozes``: how often the job was snoozed before.
    """
    kind, job = outcome.kind, outcome.job
    by_kind = decide_by_kind(kind, cancelled)
    if by_kind is not None:
        return by_kind
    failure = outcome.failure or UNKNOWN_FAILURE
    if kind is Kind.SNOOZED:
        try:
            delay_ms = snooze_delay_ms(outcome.snooze_s)
        except Exception as exc:
            failure, kind = failure_of(exc), Kind.FAILED
        else:
            if snoozes >= MAX_SNOOZES:
                return Decision(Action.DEAD, failure=SNOOZE_LIMIT_FAILURE)
            return Decision(Action.SNOOZE, delay_ms, now_ms + delay_ms)
    if kind is Kind.PERMANENT or job.attempts >= max_attempts:
        return Decision(Action.DEAD, failure=failure)
    delay_ms = retry_delay_ms(backoff, job.attempts, jitter=jitter)
    return Decision(Action.RETRY, delay_ms, now_ms + delay_ms, failure)


def retry_delay_ms(backoff: Backoff | None, attempt: int, *, jitter: bool = True) -> int:
    """The wait before the retry after failed attempt number ``attempt``."""
    if backoff is None:
        return UNKNOWN_DELAY_MS
    try:
        return _delay_ms(backoff, attempt, jitter)
    except Exception:
        fallback = DEFAULT_BACKOFF if jitter and _jitters(backoff) else _STEADY_DEFAULT
        return _delay_ms(fallback, attempt, jitter)


_STEADY_DEFAULT = Backoff(jitter=False)


def _delay_ms(backoff: Backoff, attempt: int, jitter: bool) -> int:
    seconds = backoff.delay(attempt) if jitter else backoff.bound(attempt)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("a backoff returns seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("a backoff returns a finite number of seconds >= 0")
    return round(seconds * 1000)


def _jitters(backoff: Backoff) -> bool:
    try:
        return backoff.jitter is not False
    except Exception:
        return True


def decide_stopped(attempts: int, max_attempts: int) -> Decision:
    """A job still running when its worker's grace ran out. Its attempt is spent, as
    when a lease expires, and the reaper's rule is applied at once rather than at the
    lease's end: back to the queue now, for another worker (no backoff: nothing says the
    job is at fault), or to the dead letters after its last attempt."""
    action = Action.DEAD if attempts >= max_attempts else Action.RETRY
    return Decision(action, failure=STOPPED_FAILURE)
