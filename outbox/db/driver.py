"""The driver seam: every database operation the services make, as one ``Protocol``.

``Driver`` is the interface only. ``shared.py`` implements it once for every dialect;
``sqlite.py``, ``postgresql.py`` and ``mysql.py`` each subclass that implementation with
what their dialect does differently, and hold the rest of the dialect's behaviour
(connecting, BEGIN/COMMIT/ROLLBACK, binding parameters) as its ``Backend``.
``drivers.py`` is the one factory that picks a backend. See the contract in
``outbox.db``'s docstring.

Every operation is one short transaction (or one autocommit statement) under the
connection's retry policy, unless its name ends in ``_in_tx``: those run inside a
transaction the caller opened with ``conn.transaction()``.

``Executor`` is the connection as a driver sees it, so that this module and the
dialect modules need nothing from ``connection.py`` (which builds connections through
``drivers.py``, and so sits above them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from outbox.db.dialect import Dialect
from outbox.db.rows import (
    ClaimedJob,
    DashboardCounts,
    DashboardJobs,
    ExpiredJob,
    FailedDetail,
    FailedIntent,
    FailedRow,
    Failure,
    HandoffResult,
    IntentCounts,
    JobClaim,
    JobDeadLetter,
    JobFence,
    JobRelease,
    JobReleaseUnspent,
    JobRow,
    JobSnooze,
    LimitAdmit,
    LimitSlot,
    LimitVerdict,
    OutboxHandoff,
    QueueCounts,
    ReapResult,
    RetryRow,
    StoredIntent,
    ThroughputRow,
)
from outbox.db.url import URL

if TYPE_CHECKING:
    from outbox.db.rows import KeptResult, QueuedState, StoredResult

T = TypeVar("T")
Row = tuple[Any, ...]

# The LISTEN/NOTIFY channels: ``record()`` wakes relays, handoffs and ``push()`` wake workers.
RELAY_CHANNEL = "outbox_relay"
JOBS_CHANNEL = "outbox_jobs"
LEASE_EXPIRED = "LeaseExpired"
# The dead letter's exception class for a job an operator cancelled (`outbox queue cancel`).
CANCELLED = "cancelled"
CANCELLED_FAILURE = Failure(CANCELLED, "cancelled by an operator (outbox queue cancel)", "")

# Why a compare-and-set on a held job changed nothing (job_held_state's answer).
Unchanged = Literal["lost", "cancelled", "limit"]
SnoozeOutcome = Literal["snoozed", "lost", "cancelled", "limit"]
PayloadOf = Literal["job", "dead", "intent"]


class Executor(Protocol):
    """One connection of ours as drivers use it (``outbox.db.connection.Connection``)."""

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...

    def execute_count(self, name: str, params: Mapping[str, Any] | None = None) -> int: ...

    def transact(self, fn: Callable[[Executor], T], *, operation: str) -> T: ...

    def atomic(self, fn: Callable[[Executor], T], *, operation: str) -> T: ...

    def transact_at_once(
        self, steps: Sequence[tuple[str, Mapping[str, Any]]], *, operation: str
    ) -> list[Row]: ...

    def read(self, fn: Callable[[Executor], T], *, operation: str) -> T: ...


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """What ``Database`` passes to a backend's ``connector`` besides the URL."""

    sqlite_busy_timeout_ms: int


@dataclass(frozen=True, slots=True)
class Backend:
    """What one dialect's module tells a connection: how to open one, how a transaction
    begins and ends, how parameters are bound and rows detected, and its ``Driver``.

    ``connector(url, options)`` checks the URL's parameters at once (a bad one is
    refused when the ``Database`` is made, not at its first connection) and returns
    what opens a raw connection. ``atomic_in_transaction``: a lone statement still
    takes BEGIN and COMMIT (SQLite: see ``Connection.atomic``).
    """

    dialect: Dialect
    connector: Callable[[URL, ConnectOptions], Callable[[], Any]]
    begin: Callable[[Any], None]
    commit: Callable[[Any], None]
    rollback: Callable[[Any], None]
    has_rows: Callable[[Any], bool]
    driver: Callable[[Executor], Driver]
    adapt: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None  # None: as given
    atomic_in_transaction: bool = False
    # A context in which statements go out without waiting for each answer (psycopg's
    # pipeline mode), or None where the driver has none: ``Connection.transact_at_once``.
    pipeline: Callable[[Any], AbstractContextManager[Any]] | None = None


class Driver(Protocol):
    """The operations on one connection of ours, named noun-verb."""

    @property
    def dialect(self) -> Dialect: ...

    # -- clock and session ------------------------------------------------------------

    def clock_now(self) -> int:
        """The database's clock, in milliseconds since the UNIX epoch."""
        ...

    def session_start_worker(self) -> None:
        """Settings of a worker's own connection (see ``queue_worker_session``), outside
        any transaction: SQLite refuses to change ``synchronous`` inside one."""
        ...

    def listen_statement(self, channel: str) -> str:
        """The statement that subscribes a connection to ``channel`` (LISTEN dialects;
        elsewhere ``DatabaseError``)."""
        ...

    # -- jobs -------------------------------------------------------------------------

    def job_claim(self, p: JobClaim) -> list[ClaimedJob]:
        """Hold up to ``p.limit`` due jobs of a queue not paused, most urgent first, then
        oldest due first, each attempt counted."""
        ...

    def job_ack(self, fence: JobFence) -> set[int]:
        """Delete finished jobs; return the ids this worker still held."""
        ...

    def job_ack_claim(self, done: JobFence, claim: JobClaim) -> tuple[set[int], list[ClaimedJob]]:
        """``job_ack(done)`` then ``job_claim(claim)`` in one transaction."""
        ...

    def job_ack_in_tx(self, fence: JobFence) -> bool:
        """Delete one held job inside the caller's open transaction (transactional
        handlers: the handler's writes and the acknowledgement commit together)."""
        ...

    def job_heartbeat(self, fence: JobFence, lease_ms: int) -> int:
        """Renew the leases of held jobs in one statement; how many rows changed."""
        ...

    def job_release(self, p: JobRelease) -> bool:
        """A failed attempt back to the queue; False if the lease was lost."""
        ...

    def job_release_unspent(self, p: JobReleaseUnspent) -> int:
        """Held jobs back with their attempt refunded; how many were still held."""
        ...

    def job_dead_letter(self, p: JobDeadLetter) -> bool:
        """Move a held job to the dead letters in one transaction; False if not held."""
        ...

    def job_snooze(self, p: JobSnooze) -> SnoozeOutcome:
        """``outbox.Snooze``: the job back after ``p.delay_ms``, attempt given back.

        Returns ``"snoozed"``; or, when nothing changed, why: ``"cancelled"`` (an operator
        cancelled it), ``"limit"`` (snoozed ``p.max_snoozes`` times already) or ``"lost"``
        (no longer held by this attempt).
        """
        ...

    def job_cancel_settle(self, holder: str, job: ClaimedJob) -> Literal["cancelled", "lost"]:
        """A held job whose ack or release changed nothing: to the dead letters as
        cancelled if an operator cancelled it (``"cancelled"``), else ``"lost"``."""
        ...

    def job_cancel_requested(self, fence: JobFence) -> set[int]:
        """Which of the held jobs an operator has cancelled (read with each heartbeat)."""
        ...

    def job_reap(
        self,
        limit_for: Callable[[str, int | None], int],
        batch: int,
        holds_key: Callable[[str], bool] | None = None,
    ) -> ReapResult:
        """Return up to ``batch`` expired leases to the queue; dead-letter those at
        their attempt limit (``limit_for(job_name, row_max_attempts)``), keeping the
        ordering key blocked where ``holds_key(job_name)`` says so.

        Each write re-checks holder, attempt and expiry, so a job acknowledged or renewed
        after the scan is never resurrected. One indexed read when nothing has expired.
        """
        ...

    def on_ring(self) -> bool:
        """Is the queue's storage PostgreSQL's ring (``outbox.db.ring``)? A worker then
        runs the ring's ``RingTicker`` beside its claims."""
        ...

    def ring_rotate(self) -> str | None:
        """One pass of the ring's rotation (``outbox_ring_rotate``): its answer, or
        ``None`` when it failed (logged by class) or there is no ring."""
        ...

    def ordering_heal(self, limit: int) -> int:
        """Give up to ``limit`` ordering keys whose waiting jobs have no turn (left so by
        code that does not pass turns on) their next turn; how many jobs got one."""
        ...

    def job_reap_scan(self, limit: int) -> list[ExpiredJob]:
        """Held jobs whose lease has expired, oldest expiry first."""
        ...

    def job_reap_release(self, job: ExpiredJob) -> int:
        """An expired job back to the queue, if still expired and held by that attempt."""
        ...

    def job_reap_dead(self, job: ExpiredJob, hold_key: bool = False) -> bool:
        """An expired job at its attempt limit to the dead letters."""
        ...

    def job_remove(self, message_id: str) -> int:
        """Delete a queued job (held or not); how many rows went."""
        ...

    # -- the outbox -------------------------------------------------------------------

    def outbox_handoff(
        self, p: OutboxHandoff, verify: Callable[[StoredIntent], str | None]
    ) -> HandoffResult:
        """Move one batch of pending intents into the SQL queue in one transaction.

        Rows are verified in SQL, or with ``verify`` when ``p.verify_in_python``; a row
        that fails is quarantined with its reason and its batch peers continue.
        """
        ...

    def outbox_handoff_published(
        self,
        p: OutboxHandoff,
        verify: Callable[[StoredIntent], str | None],
        publish: Callable[[list[StoredIntent]], set[str]],
    ) -> HandoffResult:
        """Hand a batch off to a broker in one transaction: claim and lock the oldest
        pending intents, quarantine those that do not verify (in SQL, or with ``verify``
        when ``p.verify_in_python``), ``publish`` the rest (it returns the message ids
        the broker acknowledged) and delete only those. Rows the broker did not
        acknowledge stay pending; a crash before COMMIT re-publishes them, which the
        broker's dedupe on the message id absorbs."""
        ...

    def outbox_claim_checked_in_tx(self, p: OutboxHandoff) -> list[tuple[StoredIntent, str | None]]:
        """The oldest pending intents, locked, each with the reason it fails verification
        in SQL (None: valid)."""
        ...

    def outbox_claim_in_tx(self, p: OutboxHandoff) -> list[StoredIntent]:
        """The oldest pending intents, locked, with every column verification reads."""
        ...

    def outbox_pending_count(self) -> int:
        """How many intents are pending."""
        ...

    def ordering_held(self, limit: int) -> list[tuple[str, str, str, str]]:
        """Up to ``limit`` ordering keys dead letters hold (``dead_letter_holds_key``):
        ``(key digest, dead letter's message id, job name, queue)``, oldest first."""
        ...

    def ordering_counts(self) -> tuple[int, int]:
        """Queued jobs waiting for their key's turn, and the keys they wait on
        (``outbox.db.ordering``)."""
        ...

    def workflow_counts(self) -> tuple[int, int]:
        """Workflows still running, and their nodes waiting for a dependency: rows no
        queue count shows, since a node becomes a job only once it is due."""
        ...

    def outbox_backlog(self) -> tuple[int, int | None, int]:
        """Pending intents, the oldest one's ``created_at`` and the database's clock (ms):
        the relay's backlog gauges, two index reads."""
        ...

    def outbox_counts(self) -> IntentCounts:
        """Intents by state, and the oldest pending one's age by the database's clock."""
        ...

    def outbox_failed_list(self, limit: int) -> list[FailedIntent]:
        """Quarantined intents, at most ``limit``."""
        ...

    def outbox_retry_lookup_in_tx(self, message_id: str) -> RetryRow | None:
        """The intent ``outbox retry`` asks for, locked while it is re-verified."""
        ...

    def outbox_requeue_in_tx(self, row_id: int) -> int:
        """A quarantined intent back to pending, as stored."""
        ...

    def outbox_accept_in_tx(self, row_id: int, payload: str, fingerprint: str) -> int:
        """The row's current contents, re-sealed: its key row takes the new fingerprint."""
        ...

    def outbox_prune(self, age_ms: int, batch: int) -> int:
        """Delete at most ``batch`` key rows older than ``age_ms`` whose intents were
        handed off (and as many leftover tombstones); how many key rows went."""
        ...

    # -- queue administration -----------------------------------------------------------

    def queue_counts(self) -> list[QueueCounts]:
        """Counts per queue (ready, delayed, reserved, dead, paused), one reading of the
        clock."""
        ...

    def queue_jobs(self, queue: str | None, limit: int) -> list[JobRow]:
        """Queued jobs (of ``queue``, or of all), at most ``limit``."""
        ...

    def dead_list(self, limit: int) -> list[FailedRow]:
        """Dead letters, at most ``limit``."""
        ...

    def dead_show(self, message_id: str) -> FailedDetail | None:
        """One dead letter with its exception's message and trace."""
        ...

    def dead_requeue(self, message_ids: Sequence[str] | None, batch: int) -> int:
        """Requeue the given dead letters (or the next ``batch`` of them), attempts reset."""
        ...

    def dead_delete(self, message_id: str) -> int:
        """Forget one dead letter; how many rows went."""
        ...

    def queue_clear(self, queue: str | None) -> int:
        """Delete the unheld jobs of ``queue`` (or of all); how many went."""
        ...

    def queue_paused(self) -> dict[str, int]:
        """Every paused queue and when it was paused (database milliseconds)."""
        ...

    def queue_job_count(self, queue: str) -> int:
        """Jobs of ``queue`` in the table, held or not."""
        ...

    # -- per-minute completions (the dashboard's chart; outbox.queue.throughput) ----------

    def throughput_add(self, worker_id: str, rows: str) -> None:
        """Add a worker's counts to its own rows: ``rows`` is a JSON array of
        ``[age_ms, queue, succeeded, retried, dead]`` (see ``throughput.sql``)."""
        ...

    def throughput_prune(self, keep_ms: int) -> int:
        """Delete the minutes older than ``keep_ms`` by the database's clock."""
        ...

    # -- global limits (outbox.db.limits) -------------------------------------------------

    def limit_admit(self, p: LimitAdmit) -> list[LimitVerdict]:
        """Admit ``p.asks`` in order while within every limit, at most ``p.room``: an
        admitted job holds a slot (concurrency) and counts a start (rate). Each other
        ask goes back to the queue unspent: over a limit, due when room is expected
        (registered to be woken when a slot frees, or holding a reserved start); within
        its limits but past ``p.room``, at once."""
        ...

    def limit_release(self, holder: str, slots: Sequence[LimitSlot]) -> int:
        """Free the slots of settled jobs, each waking the first job that waits on its
        key; how many were still held."""
        ...

    def limit_heartbeat(self, holder: str, slots: Sequence[LimitSlot], lease_ms: int) -> int:
        """Renew held slots for another ``lease_ms``; how many were still held."""
        ...

    def limit_prune(self, older_ms: int, batch: int = 1000) -> int:
        """Delete what no admission will read again: starts and tickets older than
        ``older_ms``, slots expired that long ago, waits of jobs gone, then the key rows
        left with nothing under them (created over ``older_ms`` ago); how many key rows
        went. In batches of ``batch``, each its own short transaction."""
        ...

    # -- the scheduler and the dashboard ------------------------------------------------

    def schedule_keys_recorded(self, key_digests: Sequence[str]) -> dict[str, str]:
        """Which of ``key_digests`` are recorded, each with its message id (known until
        ``outbox prune`` removes the key row)."""
        ...

    def dashboard_counts(self, cap: int) -> DashboardCounts:
        """The overview's counts, each index-backed and capped at ``cap`` (held jobs
        excepted: workers bound them)."""
        ...

    def dashboard_jobs(self, p: DashboardJobs) -> list[Row]:
        """One page of a queue's jobs in one state (``outbox.dashboard.store.job_page``
        reads the columns); ``p`` says which and from where."""
        ...

    def dashboard_job(self, message_id: str) -> Row | None:
        """One queued job's columns (no payload)."""
        ...

    def dashboard_intent(self, message_id: str) -> Row | None:
        """One intent's columns (no payload)."""
        ...

    def dashboard_payload(self, of: PayloadOf, message_id: str) -> str | None:
        """The stored JSON text of a job, dead letter or intent."""
        ...

    def dashboard_throughput(self, since_ms: int) -> list[ThroughputRow]:
        """Every worker's per-minute counts since ``since_ms`` (database milliseconds)."""
        ...

    # -- job results (outbox.db.results) -----------------------------------------------

    def result_ack(self, fence: JobFence, kept: Sequence[KeptResult]) -> set[int]:
        """``job_ack(fence)`` and the result of each job it acknowledged, one transaction."""
        ...

    def result_dead_letter(self, p: JobDeadLetter, kept: KeptResult) -> bool:
        """``job_dead_letter(p)`` and the failed result, in one transaction."""
        ...

    def result_write_in_tx(self, kept: KeptResult) -> None:
        """A result inside the caller's open transaction (transactional handlers)."""
        ...

    def result_get(self, message_id: str) -> StoredResult | None:
        """One job's kept result."""
        ...

    def result_job_state(self, message_id: str) -> QueuedState | None:
        """A job still in the queue (waiting or held), or still a pending intent."""
        ...

    def result_prune(self, batch: int) -> int:
        """Delete at most ``batch`` results past their retention; how many went."""
        ...
