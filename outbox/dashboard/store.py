"""The dashboard's own reads: the job pages, one job, payloads on request, the chart.

Lists of dead letters and quarantined intents, and every action, go through
``outbox.queue.admin`` and ``outbox.relay.admin``, as the CLI's do. What those lack is
here, as named statements of ``schemas/<dialect>/dashboard.sql``: each one index-backed,
so a page costs the same with a million jobs as with ten.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from outbox.db.connection import Connection
from outbox.db.driver import PayloadOf as PayloadOf
from outbox.db.driver import Row
from outbox.db.rows import DashboardJobs
from outbox.errors import InvalidJob
from outbox.job import MAX_PRIORITY, MIN_PRIORITY, NAME_PATTERN
from outbox.queue import admin

JobState = Literal["ready", "delayed", "reserved"]
JOB_STATES: tuple[JobState, ...] = ("ready", "delayed", "reserved")
MINUTE_MS = 60_000
CHART_MINUTES = 60
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class Job:
    """A queued job without its payload; ``id`` is the row id, used only as a page cursor."""

    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    available_at: int
    reserved_at: int | None
    reserved_by: str | None
    lease_expires_at: int | None
    created_at: int
    last_error: str | None
    priority: int


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page starts: after this priority, sort value and row id, the order
    of the claim index (held jobs sort by lease expiry; their cursor's priority is 0)."""

    after_at: int = -1
    after_id: int = 0
    priority: int = MIN_PRIORITY

    def encode(self) -> str:
        return f"{self.priority}:{self.after_at}.{self.after_id}"

    @classmethod
    def decode(cls, text: str | None) -> Cursor:
        """``"PRIORITY:AT.ID"`` from a link (``"AT.ID"``, a link made before priorities,
        means priority 0); ``ValueError`` for anything else."""
        if not text:
            return cls()
        priority, colon, rest = text.rpartition(":")
        at, sep, row_id = rest.partition(".")
        known = priority.isdigit() and MIN_PRIORITY <= int(priority) <= MAX_PRIORITY
        if not sep or not at.lstrip("-").isdigit() or not row_id.isdigit() or (colon and not known):
            raise ValueError(f"{text!r} is not a page cursor (PRIORITY:AT.ID)")
        return cls(int(at), int(row_id), int(priority) if colon else MIN_PRIORITY)


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next: Cursor | None


@dataclass(frozen=True, slots=True)
class Intent:
    """An intent still in the outbox: pending or quarantined (``failed``). One handed off
    has left the table (schema 2), so it is not found here."""

    message_id: str
    job_name: str
    queue: str
    state: str
    max_attempts: int | None
    available_at: int | None
    created_at: int
    failed_at: int | None
    failure_reason: str | None


@dataclass(frozen=True, slots=True)
class Minute:
    """Jobs settled by workers in one minute (``start_ms`` by the database's clock):
    succeeded, failed and sent back to retry, dead-lettered."""

    start_ms: int
    succeeded: int = 0
    retried: int = 0
    dead: int = 0

    def plus(self, succeeded: int, retried: int, dead: int) -> Minute:
        return Minute(self.start_ms, self.succeeded + succeeded, self.retried + retried,
                      self.dead + dead)


@dataclass(frozen=True, slots=True)
class Throughput:
    """The chart's hour: every queue's minutes summed, and each queue's hour in total."""

    minutes: list[Minute]
    per_queue: dict[str, Minute]


def check_job_name(value: str | None) -> str | None:
    if value is not None and not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(f"job name {value!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
    return value


@dataclass(frozen=True, slots=True)
class QueueCounts:
    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    dead: int = 0


@dataclass(frozen=True, slots=True)
class Counts:
    """What the overview shows, each count exact up to ``cap`` and ``cap`` beyond it.

    Exact counts cost a read of every counted row: with a million jobs that is most of a
    second per refresh. Counting up to a cap keeps each one a bounded index range; an
    operator needs to know "10,000 or more", and ``outbox status`` gives the exact figure.
    """

    pending: int
    failed: int
    oldest_pending_age_s: float | None
    queues: dict[str, QueueCounts]
    cap: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "outbox": {
                "pending": self.pending,
                "failed": self.failed,
                "oldest_pending_age_s": self.oldest_pending_age_s,
            },
            "queues": {name: asdict(q) for name, q in sorted(self.queues.items())},
            "count_cap": self.cap,
        }


def counts(conn: Connection, cap: int = COUNT_CAP) -> Counts:
    """Intents and per-queue jobs by state, each count index-backed and capped at ``cap``
    (held jobs excepted: workers bound them)."""
    got = conn.driver.dashboard_counts(cap)
    queues = {
        name: QueueCounts(ready, delayed, got.held.get(name, 0), dead)
        for name, (ready, delayed, dead) in got.queues.items()
    }
    oldest = got.oldest_pending_ms
    age = None if oldest is None else round(max(0, got.now_ms - oldest) / 1000, 3)
    return Counts(got.pending, got.failed, age, queues, cap)


def job_page(
    conn: Connection,
    queue: str,
    state: JobState,
    *,
    job_name: str | None = None,
    cursor: Cursor = Cursor(),
    limit: int = 50,
) -> JobPage:
    """One page of a queue's jobs in one state, in the order a worker meets them: ready
    and delayed jobs by (priority, available_at, id), the claim index's order, held jobs
    by lease expiry."""
    if state not in JOB_STATES:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)}")
    cursor = cursor or Cursor()
    page = DashboardJobs(
        state,
        admin.check_queue(queue),
        check_job_name(job_name),
        cursor.after_at,
        cursor.after_id,
        cursor.priority,
        admin.check_limit(limit) + 1,
    )
    rows = conn.driver.dashboard_jobs(page) if state == "reserved" else _by_priority(conn, page)
    jobs = [Job(*row[:12]) for row in rows[:limit]]
    if len(rows) <= limit:
        return JobPage(jobs, None)
    last = jobs[-1]
    if state == "reserved":
        return JobPage(jobs, Cursor(int(last.lease_expires_at or 0), int(rows[limit - 1][12])))
    return JobPage(jobs, Cursor(last.available_at, int(rows[limit - 1][12]), last.priority))


def _by_priority(conn: Connection, page: DashboardJobs) -> list[Row]:
    """Up to ``page.limit`` rows, one exact index range per priority from the cursor's
    on (the statement says why); the cursor's position applies to its own priority only."""
    rows: list[Row] = []
    wanted = page.limit
    for priority in range(page.priority, MAX_PRIORITY + 1):
        rows += conn.driver.dashboard_jobs(
            replace(page, priority=priority, limit=wanted - len(rows))
        )
        if len(rows) >= wanted:
            break
        page = replace(page, after_at=-1, after_id=0)
    return rows


def job(conn: Connection, message_id: str) -> Job | None:
    row = conn.driver.dashboard_job(admin.check_message_id(message_id))
    return None if row is None else Job(*row)


def intent(conn: Connection, message_id: str) -> Intent | None:
    row = conn.driver.dashboard_intent(admin.check_message_id(message_id))
    return None if row is None else Intent(*row)


def payload(conn: Connection, of: PayloadOf, message_id: str) -> str | None:
    """The stored JSON text, for a signed-in operator of a ``--show-payloads`` dashboard."""
    return conn.driver.dashboard_payload(of, admin.check_message_id(message_id))


def throughput(conn: Connection, minutes: int = CHART_MINUTES) -> Throughput:
    """Per minute over the last ``minutes``, oldest first, from ``outbox_throughput``:
    what workers counted as they settled jobs (``outbox.queue.throughput`` says what is
    counted and what a killed worker loses). At most a row per minute, queue and worker."""
    now = conn.driver.clock_now()
    first = now // MINUTE_MS - minutes + 1
    by_minute = {m: Minute(m * MINUTE_MS) for m in range(first, first + minutes)}
    per_queue: dict[str, Minute] = {}
    for row in conn.driver.dashboard_throughput(first * MINUTE_MS):
        counts = (row.succeeded, row.retried, row.dead)
        m = row.minute_ms // MINUTE_MS
        if m in by_minute:
            by_minute[m] = by_minute[m].plus(*counts)
        per_queue[row.queue] = per_queue.get(row.queue, Minute(first * MINUTE_MS)).plus(*counts)
    return Throughput(list(by_minute.values()), per_queue)
