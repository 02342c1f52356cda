"""The worker's gate for global concurrency and rate limits.

Design. The claim is not touched: it stays one indexed statement whatever the limits,
so a registry without limits runs exactly as fast as before. The gate is consulted only
for jobs it applies to (their name has limits in the registry, or their queue has a
``queue_limits`` cap), right after they were claimed and before any handler sees them:

    claimed ──admit──► admitted: start now (holds a slot, counted a start)
       │                   └─ settles ──► slot freed, first waiter woken
       ├──► over a limit: back to the queue unspent, due when room is expected
       └──► no free thread here: back unspent at once, keeping its place

- The limits live in the database (``outbox_limits``, ``outbox_limit_slots``,
  ``outbox_limit_starts``, ``outbox_limit_waits``; ``outbox.db.limits``), so they hold
  across every process and host and survive restarts. An admission locks each key's row,
  counts and takes in one transaction: two workers never both take the last slot.
- A concurrency slot is tied to the job's attempt and lease: it expires with the lease,
  heartbeats renew both, and it is freed when the job settles (success, failure, timeout
  or hand-back). A SIGKILLed worker's slot therefore comes back when its lease expires.
- A rate limit counts admissions by the database's clock in a sliding window: a job
  starts only while fewer than N started in the window before it. The window is
  widened by 5% (at most 1 s) so that the handlers' own start times, a few
  milliseconds after admission, keep within N too.
- A job over a limit spends no attempt and no worker spins on it: it goes back with
  ``available_at`` set to when room is expected, and the worker that sent it back
  sleeps until then. Over a rate limit, that is its ticket's time: tickets are placed
  one by one as if they were starts, so a backlog returns at the pace of the limit, not
  all at once. Over a concurrency limit, it is the first slot's lease expiry, and a
  freed slot wakes the oldest waiting job at once.
- Prefetch: a worker admits at most as many limited jobs as it has free threads in the
  queue; the surplus goes straight back, and the queue claims again once one of its
  jobs settles. While its claims meet limited jobs it can admit, it claims no more than
  it has free threads for; when every one was over its limit, it claims full batches
  again (a backlog then gets its tickets in a few transactions, not one per thread).
  Admitted jobs start at once, so a slot is never held by a job waiting in a buffer.
- Design choices and their cost: every check is a transaction of its own, after the
  claim, only for limited jobs (about 10 round trips per batch); a concurrency-limited
  name with very short handlers therefore runs below its limit. The key rows in
  ``outbox_limits`` stay (one per key value ever seen; ``outbox prune`` does not
  remove them yet).
- ``concurrency_key(payload)`` must return a str or an int. One that raises or returns
  anything else dead-letters that job (``ConcurrencyKeyError``, the message saying
  which) instead of stopping the worker.
"""

from __future__ import annotations

import hashlib
import heapq
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from outbox.db.rows import ClaimedJob, Failure, LimitAsk, LimitScope, LimitSlot
from outbox.job import sealing
from outbox.queue.limits import Limits
from outbox.queue.registry import Registry

if TYPE_CHECKING:
    from outbox.queue.settle import Settler

KEY_ERROR = "ConcurrencyKeyError"
# The rate window is widened by this share of itself (capped): see the module docstring.
WINDOW_MARGIN = 0.05
WINDOW_MARGIN_CAP_MS = 1_000
# A job sent back over a limit is claimed this long after it is due, so that the
# database's clock has passed its time too.
DUE_SLACK_S = 0.005


@dataclass(frozen=True, slots=True)
class KeyFailure:
    """A job whose ``concurrency_key`` could not be computed: it is dead-lettered."""

    job: ClaimedJob
    failure: Failure


@dataclass(slots=True)
class Passed:
    """What ``Gate.through`` made of a claimed batch: the jobs to start, those handed
    back (over a limit, or undecided when the database failed), those whose key could
    not be computed (to dead-letter), and how many of the handed back were deferred."""

    start: list[ClaimedJob]
    back: list[ClaimedJob] = field(default_factory=list)
    bad: list[KeyFailure] = field(default_factory=list)
    deferred: int = 0


class Gate:
    """Which claimed jobs are limited, under which scopes, and the slots held here; and
    the worker's bookkeeping about them, per queue: which claim no more than their free
    threads (``gated``), which wait for a free thread (``full``), and when the jobs sent
    back over a limit are due again."""

    def __init__(self, registry: Registry, queue_limits: dict[str, int]) -> None:
        self._limits = registry.limited
        self._queue_limits = dict(queue_limits)
        self._queue_scopes = {
            q: LimitScope(_digest("queue", q), concurrency=n) for q, n in queue_limits.items()
        }
        self.slots: dict[int, tuple[LimitSlot, ...]] = {}
        self.to_free: list[LimitSlot] = []
        self.gated: set[str] = set()
        self.full: set[str] = set()
        self._due: dict[str, list[float]] = {}  # per queue, a heap of due times

    def through(
        self, queue: str, jobs: list[ClaimedJob], free: int, now: float, settler: Settler
    ) -> Passed:
        """Admit the limited jobs of a claimed batch, at most ``free`` (this queue's free
        threads); ``now`` (the worker's clock, read before the admission: a wait counts
        from the database's reading) dates the jobs sent back over a limit."""
        limited = [j for j in jobs if self.applies(j)]
        if not limited:
            self.gated.discard(queue)
            return Passed(jobs)
        passed = Passed([j for j in jobs if not self.applies(j)])
        asks, passed.bad = self.asks(limited)
        verdicts = settler.admit(asks, max(free, 0)) if asks else []
        decided = {v.job.id for v in verdicts}
        passed.back = [a.job for a in asks if a.job.id not in decided]
        (self.gated.add if any(v.wait_ms == 0 for v in verdicts) else self.gated.discard)(queue)
        by_id = {a.job.id: a for a in asks}
        admitted = []
        for v in verdicts:
            if v.admitted:
                self.hold(by_id[v.job.id])
                admitted.append(v.job)
                continue
            passed.back.append(v.job)
            passed.deferred += 1
            if v.wait_ms:
                due = now + v.wait_ms / 1000 + DUE_SLACK_S
                heapq.heappush(self._due.setdefault(queue, []), due)
            else:
                self.full.add(queue)
        passed.start = admitted + passed.start
        return passed

    def next_due(self, queue: str, now: float) -> float:
        """When the next job this worker sent back over a limit is due (else never)."""
        due = self._due.get(queue)
        while due and due[0] <= now:
            heapq.heappop(due)
        return due[0] if due else float("inf")

    @property
    def active(self) -> bool:
        """Does any job need the gate at all? If not the worker never calls it."""
        return bool(self._limits or self._queue_limits)

    def applies(self, job: ClaimedJob) -> bool:
        return job.job_name in self._limits or job.queue in self._queue_limits

    def asks(self, jobs: Sequence[ClaimedJob]) -> tuple[list[LimitAsk], list[KeyFailure]]:
        """The limit scopes of each job; jobs whose key cannot be computed apart."""
        asks: list[LimitAsk] = []
        failed: list[KeyFailure] = []
        for job in jobs:
            scopes: list[LimitScope] = []
            queue_scope = self._queue_scopes.get(job.queue)
            if queue_scope is not None:
                scopes.append(queue_scope)
            limits = self._limits.get(job.job_name)
            if limits is not None:
                try:
                    scopes.append(_job_scope(job, limits))
                except _BadKey as exc:
                    failed.append(KeyFailure(job, exc.failure))
                    continue
            asks.append(LimitAsk(job, tuple(scopes)))
        return asks, failed

    def hold(self, ask: LimitAsk) -> None:
        """``ask`` was admitted: remember its slots (to renew and to free)."""
        slots = tuple(LimitSlot(s.key, ask.job) for s in ask.scopes if s.concurrency is not None)
        if slots:
            self.slots[ask.job.id] = slots

    def settled(self, job: ClaimedJob) -> bool:
        """``job`` left this worker: queue its slots to be freed. True if it had any."""
        slots = self.slots.pop(job.id, None)
        if slots:
            self.to_free.extend(slots)
        return bool(slots)

    def held(self) -> list[LimitSlot]:
        return [s for slots in self.slots.values() for s in slots]

    def take_to_free(self) -> list[LimitSlot]:
        out, self.to_free = self.to_free, []
        return out


class _BadKey(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


def _job_scope(job: ClaimedJob, limits: Limits) -> LimitScope:
    key = "" if limits.key is None else _key_value(job, limits)
    window = 0
    if limits.rate is not None:
        margin = min(int(limits.rate.window_ms * WINDOW_MARGIN), WINDOW_MARGIN_CAP_MS)
        window = limits.rate.window_ms + margin
    return LimitScope(
        _digest("job", job.job_name, key),
        concurrency=limits.concurrency,
        rate=None if limits.rate is None else limits.rate.count,
        window_ms=window,
    )


def _key_value(job: ClaimedJob, limits: Limits) -> str:
    assert limits.key is not None
    try:
        value = limits.key(sealing.loads(job.payload))
    except Exception as exc:
        message = f"concurrency_key of job {job.job_name!r} raised {type(exc).__name__}: {exc}"
        raise _BadKey(Failure(KEY_ERROR, message, traceback.format_exc())) from None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        message = (
            f"concurrency_key of job {job.job_name!r} returned a {type(value).__name__}; "
            "it must return a str or an int"
        )
        raise _BadKey(Failure(KEY_ERROR, message, ""))
    return f"{'s' if isinstance(value, str) else 'i'}:{value}"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
