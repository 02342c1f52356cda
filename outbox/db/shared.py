"""The shared implementation of ``outbox.db.driver.Driver``: every operation as the
dialects have it in common. ``SqliteDriver``, ``PostgresqlDriver`` and ``MysqlDriver``
(one module each) subclass it and override what their dialect does differently; the
contracts are the Protocol's docstrings.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import orjson

from outbox.db import ordering, workflows
from outbox.db.caller import drive
from outbox.db.dialect import Dialect
from outbox.db.driver import (
    CANCELLED_FAILURE,
    LEASE_EXPIRED,
    Executor,
    PayloadOf,
    Row,
    SnoozeOutcome,
    Unchanged,
)
from outbox.db.errors import translated
from outbox.db.limits import LimitOps
from outbox.db.results import ResultOps
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
    OutboxHandoff,
    QueueCounts,
    ReapResult,
    RetryRow,
    StoredIntent,
    ThroughputRow,
    has_ordering_key,
)
from outbox.errors import DatabaseError
from outbox.ids import is_node_id

T = TypeVar("T")

# A relay batch's outcome before it is timed: claimed, handed off, (id, reason) quarantined.
# claimed, handed off, (quarantined id, reason)..., trace contexts of the handed-off intents
Outcome = tuple[int, int, tuple[tuple[str, str], ...], tuple[str, ...]]


class SharedDriver(LimitOps, ResultOps):
    """``Driver`` on one connection of ours. The global limits' operations
    (``limit_admit``, ``limit_release``, ``limit_heartbeat``, ``limit_prune``) come from
    ``outbox.db.limits``, the job results' (``result_*``) from ``outbox.db.results``."""

    dialect: ClassVar[Dialect]
    # One writer at a time (SQLite): a relay batch is the oldest pending rows, read under
    # the only write lock (outbox.db.ordering.handoff_ordered).
    one_writer: ClassVar[bool] = False

    def __init__(self, conn: Executor) -> None:
        self.conn = conn

    # -- plumbing -------------------------------------------------------------------

    def _one(self, operation: str, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        """One statement in its own transaction (``Executor.atomic``)."""
        return self.conn.atomic(lambda c: c.execute(name, params), operation=operation)

    def _count(self, operation: str, name: str, params: dict[str, Any]) -> int:
        return self.conn.atomic(lambda c: c.execute_count(name, params), operation=operation)

    def _read(self, operation: str, name: str, params: dict[str, Any] | None = None) -> list[Row]:
        """A read outside any transaction (no writer lock on SQLite)."""
        return self.conn.read(lambda c: c.execute(name, params), operation=operation)

    def _transact(self, operation: str, fn: Callable[[Executor], T]) -> T:
        return self.conn.transact(fn, operation=operation)

    def _fence_params(self, fence: JobFence) -> dict[str, Any]:
        """``fence.params()`` as this dialect's statements take them (PostgreSQL's
        driver encodes the two lists its statements read)."""
        return fence.params()

    # -- clock and session ------------------------------------------------------------

    def clock_now(self) -> int:
        return int(self._read("clock", "now_ms")[0][0])

    def session_start_worker(self) -> None:
        with translated("connect"):
            self.conn.execute("queue_worker_session")

    def listen_statement(self, channel: str) -> str:
        raise DatabaseError(f"{self.dialect.name} has no LISTEN/NOTIFY", operation="listen")

    # -- jobs -------------------------------------------------------------------------

    def job_claim(self, p: JobClaim) -> list[ClaimedJob]:
        rows = self._one("claim", "job_claim", claim_params(p))
        return claimed_jobs(rows)

    def job_ack(self, fence: JobFence) -> set[int]:
        if not fence.jobs:
            return set()
        if has_ordering_key(fence):
            return self._transact("ack", lambda c: self._ack_ordered_in_tx(fence))
        return {int(r[0]) for r in self._one("ack", "job_ack", self._fence_params(fence))}

    def job_ack_claim(self, done: JobFence, claim: JobClaim) -> tuple[set[int], list[ClaimedJob]]:
        if not done.jobs:
            return set(), self.job_claim(claim)
        params = {**self._fence_params(done), **claim_params(claim)}
        keyed = has_ordering_key(done)

        def both(c: Executor) -> tuple[set[int], list[Row]]:
            if keyed:
                acked = self._ack_ordered_in_tx(done)
            else:
                acked = {int(r[0]) for r in c.execute("job_ack", params)}
            return acked, self._claim_rows_in_tx(params)

        acked, rows = self._transact("claim", both)
        return acked, claimed_jobs(rows)

    def _claim_rows_in_tx(self, params: dict[str, Any]) -> list[Row]:
        return self.conn.execute("job_claim", params)

    def job_ack_in_tx(self, fence: JobFence) -> bool:
        if has_ordering_key(fence):
            return bool(self._ack_ordered_in_tx(fence))
        return bool(self.conn.execute("job_ack", self._fence_params(fence)))

    def _ack_ordered_in_tx(self, fence: JobFence) -> set[int]:
        """The acknowledgement of jobs some of which have an ordering key: the keys'
        rows locked first (the order ``outbox.db.ordering`` takes them in), then the
        delete, then each acknowledged key's turn passed on, in this one transaction."""
        keys = {j.id: j.ordering_key for j in fence.jobs if j.ordering_key is not None}
        drive(ordering.lock(keys.values()), self.conn)
        acked = {int(r[0]) for r in self.conn.execute("job_ack", self._fence_params(fence))}
        # Every key locked, acknowledged or not: the lock created the row of a key whose
        # job another worker already took out (a lost lease), and a key row outliving
        # its jobs would make the relay's next job of the key wait (relay_handoff reads a
        # key row as a line). leave keeps the line of a key whose job is still there.
        drive(ordering.leave(keys.values(), locked=True), self.conn)
        return acked

    def job_heartbeat(self, fence: JobFence, lease_ms: int) -> int:
        if not fence.jobs:
            return 0
        params = {**self._fence_params(fence), "lease_ms": lease_ms}
        return self._count("heartbeat", "job_heartbeat", params)

    def job_release(self, p: JobRelease) -> bool:
        params = {
            "id": p.job.id,
            "holder": p.holder,
            "attempts": p.job.attempts,
            "delay_ms": p.delay_ms,
            "error": p.error[:200],
        }
        return self._count("release", "job_release", params) == 1

    def job_release_unspent(self, p: JobReleaseUnspent) -> int:
        if not p.fence.jobs:
            return 0
        params = {**self._fence_params(p.fence), "delay_ms": p.delay_ms, "error": p.error}
        return self._count("release", "job_release_unspent", params)

    def job_dead_letter(self, p: JobDeadLetter) -> bool:
        key = {"id": p.job.id, "holder": p.holder, "attempts": p.job.attempts}
        okey = p.job.ordering_key
        return self._transact(
            "dead_letter",
            lambda c: self._move_to_dead(c, "job_dead_take", key, p.failure, p.hold_key, okey),
        )

    def job_snooze(self, p: JobSnooze) -> SnoozeOutcome:
        key = {"id": p.job.id, "holder": p.holder, "attempts": p.job.attempts}

        def snooze(c: Executor) -> SnoozeOutcome:
            params = {**key, "delay_ms": p.delay_ms, "max_snoozes": p.max_snoozes}
            if c.execute_count("job_snooze", params) == 1:
                return "snoozed"
            return _why_unchanged(c.execute("job_held_state", key))

        return self._transact("snooze", snooze)

    def job_cancel_settle(self, holder: str, job: ClaimedJob) -> Literal["cancelled", "lost"]:
        key = {"id": job.id, "holder": holder, "attempts": job.attempts}

        def settle(c: Executor) -> Literal["cancelled", "lost"]:
            if _why_unchanged(c.execute("job_held_state", key)) != "cancelled":
                return "lost"
            self._move_to_dead(c, "job_dead_take", key, CANCELLED_FAILURE, False, job.ordering_key)
            return "cancelled"

        return self._transact("cancel", settle)

    def job_cancel_requested(self, fence: JobFence) -> set[int]:
        if not fence.jobs:
            return set()
        rows = self._read("heartbeat", "job_cancel_requested", self._fence_params(fence))
        return {int(r[0]) for r in rows}

    def on_ring(self) -> bool:
        return False  # the heap needs no upkeep beyond VACUUM's

    def ring_rotate(self) -> str | None:
        return None

    def job_reap(
        self,
        limit_for: Callable[[str, int | None], int],
        batch: int,
        holds_key: Callable[[str], bool] | None = None,
    ) -> ReapResult:
        result = ReapResult()
        for job in self.job_reap_scan(batch):
            if job.attempts >= limit_for(job.job_name, job.max_attempts):
                hold = holds_key is not None and holds_key(job.job_name)
                result.dead += int(self.job_reap_dead(job, hold))
            else:
                result.requeued += self.job_reap_release(job)
        result.unstuck = self.ordering_heal(batch)
        return result

    def ordering_heal(self, limit: int) -> int:
        """Pass on the turn of keys whose waiting jobs have none (``ordering_stranded``),
        each key in a transaction of its own; how many jobs got their turn. Each pass
        reads ``limit`` key rows from a random digest on (wrapping round), so a pass
        costs the same at a million keys as at ten, and every key comes up within a few
        passes; fewer keys than ``limit`` are all read every pass."""
        start = secrets.token_hex(32)  # key rows are SHA-256 digests: spread evenly
        stranded: list[tuple[str, bool]] = []  # (key, has a waiting job)
        left = limit
        for after, until in ((start, "g"), ("", start)):  # "g" sorts after every digest
            page = self._read("reap", "ordering_stranded",
                              {"after": after, "until": until, "limit": left})
            stranded += [(str(key), bool(waits)) for key, lost, waits in page if int(lost)]
            left -= len(page)
            if left <= 0:
                break
        promoted = 0
        for key, waits in stranded:

            def heal(c: Executor, key: str = key) -> None:
                drive(ordering.leave([key]), c)  # a fresh plan per try; re-checks locked

            self._transact("reap", heal)
            promoted += waits
        return promoted

    def job_reap_scan(self, limit: int) -> list[ExpiredJob]:
        rows = self._read("reap", "job_reap_scan", {"limit": limit})
        return [ExpiredJob(int(r[0]), int(r[1]), r[2], str(r[3]), str(r[4])) for r in rows]

    def job_reap_release(self, job: ExpiredJob) -> int:
        params = {**_reap_key(job), "error": LEASE_EXPIRED}
        return self._count("reap", "job_reap_release", params)

    def job_reap_dead(self, job: ExpiredJob, hold_key: bool = False) -> bool:
        failure = Failure(LEASE_EXPIRED, "the lease expired on the last attempt", "")
        key = _reap_key(job)

        def reap(c: Executor) -> bool:
            found = c.execute("ordering_key_of_job", {"id": job.id})
            okey = None if not found or found[0][0] is None else str(found[0][0])
            return self._move_to_dead(c, "job_reap_take", key, failure, hold_key, okey)

        return self._transact("reap", reap)

    @staticmethod
    def _move_to_dead(
        c: Executor,
        take: str,
        key: dict[str, Any],
        failure: Failure,
        hold_key: bool = False,
        known_key: str | None = None,
    ) -> bool:
        """Move a job to the dead letters; its ordering key, if any, is released (the
        next job of the key gets its turn) unless ``hold_key``.

        The key's row is locked before the job is taken (``known_key``, the job's key),
        as the acknowledgement does: taking the job first and locking the key after
        deadlocked on MariaDB against a job of the key entering (``ordering.enter`` locks
        the key, then reads the key's jobs with a locking read); measured with two
        processes, 385 of 1,500 pushes were deadlock victims."""
        if known_key is not None:
            drive(ordering.lock([known_key]), c)
        rows = c.execute(take, key)
        if not rows:
            if known_key is not None:  # the lock may have created the row: no row outlives
                drive(ordering.leave([known_key], locked=True), c)  # the key's jobs
            return False
        message_id, queue, job_name, payload, attempts, max_attempts, priority, okey = rows[0]
        c.execute(
            "job_dead_insert",
            {
                "priority": priority,
                "message_id": message_id,
                "queue": queue,
                "job_name": job_name,
                "payload": payload,
                "attempts": attempts,
                "max_attempts": max_attempts,
                "exception_class": failure.exception_class[:200],
                "exception_message": failure.message,
                "exception_trace": failure.trace,
                "ordering_key": okey,
                "ordering_held": int(hold_key and okey is not None),
            },
        )
        if is_node_id(str(message_id)):  # a workflow node: its dependents, in this transaction
            drive(workflows.failed(str(message_id)), c)
        if okey is not None and not hold_key:  # releases its key (outbox.db.ordering)
            drive(ordering.leave([str(okey)], locked=str(okey) == known_key), c)
        return True

    # -- the outbox -------------------------------------------------------------------

    def outbox_handoff(
        self, p: OutboxHandoff, verify: Callable[[StoredIntent], str | None]
    ) -> HandoffResult:
        started = time.perf_counter()
        outcome = self._transact("relay batch", lambda c: self._handoff_in_steps(p, verify))
        return timed(outcome, started)

    def _handoff_in_steps(
        self, p: OutboxHandoff, verify: Callable[[StoredIntent], str | None]
    ) -> Outcome:
        if p.verify_in_python:
            intents = self.outbox_claim_in_tx(p)
            claimed = [(i.id, i.message_id, verify(i)) for i in intents]
            traces = {i.id: i.trace_context for i in intents}
            keyed = {i.id: str(i.ordering_key) for i in intents if i.ordering_key is not None}
        else:
            rows = self.conn.execute("relay_claim", {"batch_size": p.batch_size})
            claimed = [(int(r[0]), str(r[1]), r[2]) for r in rows]
            traces = {int(r[0]): r[3] for r in rows}
            keyed = {int(r[0]): str(r[4]) for r in rows if r[4] is not None}
        valid = [row_id for row_id, _, reason in claimed if reason is None]
        waiting: list[int] = []
        if keyed:
            valid, waiting = self.handoff_ordered_in_tx(valid, keyed)
        self._move_in_tx(valid, waiting, p.notify)
        by_reason: dict[str, list[int]] = defaultdict(list)
        for row_id, _, reason in claimed:
            if reason is not None:
                by_reason[reason].append(row_id)
        for reason, ids in by_reason.items():
            self._expect("relay_mark_failed", ids, reason=reason)
        failed = tuple((m, r) for _, m, r in claimed if r is not None)
        return len(claimed), len(valid), failed, _traces(traces.get(i) for i in valid)

    def outbox_handoff_published(
        self,
        p: OutboxHandoff,
        verify: Callable[[StoredIntent], str | None],
        publish: Callable[[list[StoredIntent]], set[str]],
    ) -> HandoffResult:
        started = time.perf_counter()

        def batch(c: Executor) -> Outcome:
            if p.verify_in_python:
                claimed = [(i, verify(i)) for i in self.outbox_claim_in_tx(p)]
            else:
                claimed = self.outbox_claim_checked_in_tx(p)
            acked = publish(self._in_turn(c, [i for i, reason in claimed if reason is None]))
            moved = [i.id for i, reason in claimed if reason is None and i.message_id in acked]
            if moved:
                self._expect("relay_delete_moved", moved)
            by_reason: dict[str, list[int]] = defaultdict(list)
            for i, reason in claimed:
                if reason is not None:
                    by_reason[reason].append(i.id)
            for reason, ids in by_reason.items():
                self._expect("relay_mark_failed", ids, reason=reason)
            failed = tuple((i.message_id, r) for i, r in claimed if r is not None)
            sent = (i.trace_context for i, r in claimed if r is None and i.message_id in acked)
            return len(claimed), len(moved), failed, _traces(sent)

        return timed(self._transact("relay batch", batch), started)

    @staticmethod
    def _in_turn(c: Executor, valid: list[StoredIntent]) -> list[StoredIntent]:
        """The valid intents a broker batch may publish: every keyless one, and the keyed
        ones with no older pending intent of their key outside the batch (another lane
        holds it, or it failed to publish): those stay pending for a later batch, so one
        key is never in two batches in flight (``outbox.db.ordering.in_turn``)."""
        rows = [(i.id, str(i.ordering_key)) for i in valid if i.ordering_key is not None]
        if not rows:
            return valid
        keep = {i for i, _ in ordering.in_turn(c, rows)}
        return [i for i in valid if i.ordering_key is None or i.id in keep]

    def _move_in_tx(self, valid: list[int], waiting: list[int], notify: bool) -> None:
        """Move the verified intents ``valid`` into the queue; those of ``waiting`` enter
        behind their ordering key's line."""
        if not valid:
            return
        if waiting:  # they enter waiting their turn, in the same INSERT
            self._expect("relay_insert_jobs_ordered", valid, waiting=waiting)
        else:
            self._expect("relay_insert_jobs", valid)
        self._expect("relay_delete_moved", valid)
        if notify:
            self._notify_jobs_in_tx()

    def handoff_ordered_in_tx(
        self, valid: list[int], keyed: dict[int, str]
    ) -> tuple[list[int], list[int]]:
        """Of the valid ids of a batch (``keyed``: the ordering key of those that have
        one), the ids that move now, in order: every keyless one, and the keyed ones
        whose turn to enter has come (``outbox.db.ordering.handoff_ordered``); and the
        ids of those that will wait for their key's turn in the queue."""
        rows = [(i, keyed[i]) for i in valid if i in keyed]
        if not rows:
            return valid, []
        moving, waiting = ordering.handoff_ordered(self.conn, rows, one_writer=self.one_writer)
        keep = set(moving)
        return [i for i in valid if i not in keyed or i in keep], waiting

    def outbox_claim_checked_in_tx(self, p: OutboxHandoff) -> list[tuple[StoredIntent, str | None]]:
        rows = self.conn.execute("relay_claim_checked", {"batch_size": p.batch_size})
        # (intent columns..., priority, ordering_key, reason, trace_context)
        return [
            (StoredIntent(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[11], r[9]), r[10])
            for r in rows
        ]

    def _notify_jobs_in_tx(self) -> None:
        """Wake idle workers at commit (LISTEN dialects only)."""

    def outbox_claim_in_tx(self, p: OutboxHandoff) -> list[StoredIntent]:
        rows = self.conn.execute("relay_claim_rows", {"batch_size": p.batch_size})
        return [StoredIntent(*r) for r in rows]

    def _expect(self, name: str, ids: list[int], **params: Any) -> None:
        """Run ``name`` over ``ids`` and insist it touched every one of them.

        The rows are locked by this transaction, so a shortfall means a broken invariant
        (a state changed under our lock); the batch is rolled back rather than half applied.
        """
        changed = self.conn.execute_count(name, {"ids": ids, **params})
        if changed != len(ids):
            raise DatabaseError(
                f"relay batch aborted: {name} changed {changed} of {len(ids)} claimed rows",
                operation="relay batch",
            )

    def outbox_pending_count(self) -> int:
        return int(self._read("status", "status_pending_count")[0][0])

    def ordering_held(self, limit: int) -> list[tuple[str, str, str, str]]:
        rows = self._read("status", "ordering_held_keys", {"limit": limit})
        return [(str(k), str(m), str(j), str(q)) for k, m, j, q in rows]

    def ordering_counts(self) -> tuple[int, int]:
        def counts(c: Executor) -> tuple[int, int]:
            waiting, keys = c.execute("ordering_blocked_count")[0]
            return int(waiting or 0), int(keys or 0)

        return self.conn.read(counts, operation="status")

    def workflow_counts(self) -> tuple[int, int]:
        def counts(c: Executor) -> tuple[int, int]:
            running, waiting = c.execute("workflow_status_counts")[0]
            return int(running or 0), int(waiting or 0)

        return self.conn.read(counts, operation="status")

    def outbox_backlog(self) -> tuple[int, int | None, int]:

        def both(c: Executor) -> tuple[int, int | None, int]:
            oldest, now = c.execute("status_oldest_pending")[0]
            pending = int(c.execute("status_pending_count")[0][0])
            return pending, None if oldest is None else int(oldest), int(now)

        return self.conn.read(both, operation="status")

    def outbox_counts(self) -> IntentCounts:

        def both(c: Executor) -> IntentCounts:
            by_state = {str(s): int(n) for s, n in c.execute("status_state_counts")}
            keys = int(c.execute("status_key_count")[0][0])
            oldest, now = c.execute("status_oldest_pending")[0]
            oldest_ms = None if oldest is None else int(oldest)
            return IntentCounts(by_state, keys, oldest_ms, int(now))

        return self.conn.read(both, operation="status")

    def outbox_failed_list(self, limit: int) -> list[FailedIntent]:
        rows = self._read("list quarantined", "failed_list", {"limit": limit})
        return [
            FailedIntent(str(m), r, int(c), None if f is None else int(f)) for m, r, c, f in rows
        ]

    def outbox_retry_lookup_in_tx(self, message_id: str) -> RetryRow | None:
        rows = self.conn.execute("retry_lookup", {"message_id": message_id})
        if not rows:
            return None
        row_id, mid, state, fp, name, queue, payload, max_attempts, at, priority, key = rows[0]
        intent = StoredIntent(row_id, str(mid), fp, name, queue, payload, max_attempts, at,
                              priority, ordering_key=key)  # fmt: skip
        return RetryRow(str(state), intent)

    def outbox_requeue_in_tx(self, row_id: int) -> int:
        return self.conn.execute_count("retry_requeue", {"id": row_id})

    def outbox_accept_in_tx(self, row_id: int, payload: str, fingerprint: str) -> int:
        params = {"id": row_id, "payload": payload, "fingerprint": fingerprint}
        self.conn.execute_count("retry_accept_key", params)
        return self.conn.execute_count("retry_accept", params)

    def outbox_prune(self, age_ms: int, batch: int) -> int:

        def prune(c: Executor) -> int:
            params = {"age_ms": age_ms, "batch": batch}
            c.execute_count("prune_tombstones", params)
            return c.execute_count("prune_keys", params)

        return self._transact("prune", prune)

    # -- queue administration -----------------------------------------------------------

    def queue_counts(self) -> list[QueueCounts]:

        def both(c: Executor) -> list[QueueCounts]:
            dead = {str(q): int(n) for q, n in c.execute("dead_counts")}
            paused = {str(r[0]) for r in c.execute("queue_paused_list")}
            out: dict[str, QueueCounts] = {}
            for queue, ready, delayed, reserved, oldest in c.execute("queue_counts"):
                out[str(queue)] = QueueCounts(
                    str(queue),
                    int(ready or 0),
                    int(delayed or 0),
                    int(reserved or 0),
                    dead.get(str(queue), 0),
                    None if oldest is None else int(oldest),
                    str(queue) in paused,
                )
            for queue, n in dead.items():
                out.setdefault(queue, QueueCounts(queue, dead=n, paused=queue in paused))
            for queue in paused:  # a paused queue shows even with no job yet
                out.setdefault(queue, QueueCounts(queue, paused=True))
            return [out[q] for q in sorted(out)]

        return self.conn.read(both, operation="queue stats")

    def queue_jobs(self, queue: str | None, limit: int) -> list[JobRow]:
        rows = self._read("queue jobs", "queue_admin_jobs", {"queue": queue, "limit": limit})
        return [JobRow(*r) for r in rows]

    def dead_list(self, limit: int) -> list[FailedRow]:
        return [
            FailedRow(*r)
            for r in self._read("queue failed", "queue_admin_failed", {"limit": limit})
        ]

    def dead_show(self, message_id: str) -> FailedDetail | None:
        rows = self._read("queue failed", "queue_admin_failed_show", {"message_id": message_id})
        return FailedDetail(*rows[0]) if rows else None

    def dead_requeue(self, message_ids: Sequence[str] | None, batch: int) -> int:

        def requeue(c: Executor) -> int:
            ids = (
                list(message_ids)
                if message_ids is not None
                else [str(r[0]) for r in c.execute("queue_admin_failed_ids", {"limit": batch})]
            )
            nodes = [i for i in ids if is_node_id(i)]
            if nodes:  # a skipped node comes back with the failed node it waits for
                skipped = set(workflows.skipped_of(c, nodes))  # once, not once per id
                ids = [i for i in ids if i not in skipped]
            if not ids:
                return 0
            rows = c.execute("queue_admin_failed_ordered", {"ids": ids})
            # A dead letter that holds its key is the key's job in its turn once again;
            # the others join the end of their key's line.
            held = [str(k) for _, k, h in rows if h]
            keyed = [(str(m), str(k)) for m, k, h in rows if not h]
            drive(ordering.lock(held), c)
            waits = drive(ordering.enter([k for _, k in keyed]), c) if keyed else []
            inserted = c.execute_count("queue_admin_requeue", {"ids": ids})
            waiting = [m for (m, _), w in zip(keyed, waits, strict=True) if w]
            drive(ordering.block(waiting), c)
            c.execute_count("queue_admin_failed_delete", {"ids": ids})
            for node_id in nodes:
                if node_id in ids:
                    drive(workflows.requeued(node_id), c)
            return inserted

        return self._transact("queue retry", requeue)

    def dead_delete(self, message_id: str) -> int:
        key = {"message_id": message_id}  # a key the dead letter held passes its turn on
        delete = ("queue_admin_failed_delete", {"ids": [message_id]})
        return self._releasing_keys("queue forget", ("ordering_dead_key", key), delete)

    def job_remove(self, message_id: str) -> int:
        key = {"message_id": message_id}
        nodes = [message_id] if is_node_id(message_id) else []
        return self._releasing_keys(
            "queue remove", ("queue_admin_job_key", key), ("queue_admin_remove", key),
            lambda c: nodes,
        )

    def queue_clear(self, queue: str | None) -> int:
        key = {"queue": queue}
        return self._releasing_keys(
            "queue clear", ("queue_admin_clear_keys", key), ("queue_admin_clear", key),
            lambda c: [str(r[0]) for r in c.execute("queue_admin_clear_nodes", key)],
        )

    def _releasing_keys(
        self,
        operation: str,
        keys_of: tuple[str, Any],
        delete: tuple[str, Any],
        nodes_of: Callable[[Executor], list[str]] | None = None,
    ) -> int:
        """An operator's delete of rows that may hold ordering keys: lock the keys (read by
        ``keys_of``) first, delete, then pass each key's turn on, in one transaction. A
        workflow node among the jobs deleted (``nodes_of``) ends as failed, as a dead
        letter's would: its workflow no longer waits for it."""

        def run(c: Executor) -> int:
            keys = ordering.keys_of(c.execute(*keys_of))
            nodes = nodes_of(c) if nodes_of is not None else []
            drive(ordering.lock(keys), c)
            deleted = c.execute_count(*delete)
            drive(ordering.leave(keys, locked=True), c)
            for node_id in nodes:
                drive(workflows.failed(node_id), c)
            return deleted

        return self._transact(operation, run)

    def queue_paused(self) -> dict[str, int]:
        return {str(q): int(at) for q, at in self._read("queue paused", "queue_paused_list")}

    def queue_job_count(self, queue: str) -> int:
        return int(self._read("queue count", "queue_job_count", {"queue": queue})[0][0])

    # -- per-minute completions (the dashboard's chart; outbox.queue.throughput) ----------

    def throughput_add(self, worker_id: str, rows: str) -> None:
        self._one("throughput", "throughput_add", {"worker_id": worker_id, "rows": rows})

    def throughput_prune(self, keep_ms: int) -> int:
        return self._count("prune", "throughput_prune", {"keep_ms": keep_ms})

    # -- the scheduler and the dashboard ------------------------------------------------

    def schedule_keys_recorded(self, key_digests: Sequence[str]) -> dict[str, str]:
        if not key_digests:
            return {}
        params = {"key_digests": orjson.dumps(list(key_digests)).decode()}
        rows = self._read("schedule", "schedule_keys_recorded", params)
        return {str(r[0]): str(r[1]) for r in rows}

    def dashboard_counts(self, cap: int) -> DashboardCounts:
        def counts(c: Executor) -> DashboardCounts:
            pending, failed, oldest, now = c.execute("dashboard_outbox_counts", {"cap": cap})[0]
            held = {str(q): int(n) for q, n in c.execute("dashboard_held_counts")}
            names = {str(n) for (n,) in c.execute("dashboard_queue_names")} | set(held)
            queues = {}
            for name in sorted(names):
                params = {"queue": name, "cap": cap}
                ready, delayed, dead = c.execute("dashboard_queue_counts", params)[0]
                queues[name] = (int(ready), int(delayed), int(dead))
            oldest_ms = None if oldest is None else int(oldest)
            return DashboardCounts(int(pending), int(failed), oldest_ms, int(now), queues, held)

        return self.conn.read(counts, operation="dashboard counts")

    def dashboard_jobs(self, p: DashboardJobs) -> list[Row]:
        params: dict[str, Any] = {
            "queue": p.queue,
            "job_name": p.job_name,
            "after_at": p.after_at,
            "after_id": p.after_id,
            "limit": p.limit,
        }
        if p.state != "reserved":
            params["priority"] = p.priority
        return self._read("dashboard jobs", f"dashboard_jobs_{p.state}", params)

    def dashboard_job(self, message_id: str) -> Row | None:
        rows = self._read("dashboard job", "dashboard_job", {"message_id": message_id})
        return rows[0] if rows else None

    def dashboard_intent(self, message_id: str) -> Row | None:
        rows = self._read("dashboard intent", "dashboard_intent", {"message_id": message_id})
        return rows[0] if rows else None

    def dashboard_payload(self, of: PayloadOf, message_id: str) -> str | None:
        params = {"message_id": message_id}
        rows = self._read("dashboard payload", f"dashboard_{of}_payload", params)
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def dashboard_throughput(self, since_ms: int) -> list[ThroughputRow]:
        rows = self._read("dashboard throughput", "dashboard_throughput", {"since_ms": since_ms})
        return [ThroughputRow(int(m), str(q), int(s), int(r), int(d)) for m, q, s, r, d in rows]


def claim_params(p: JobClaim) -> dict[str, Any]:
    return {"queue": p.queue, "limit": p.limit, "worker": p.worker, "lease_ms": p.lease_ms}


def claimed_jobs(rows: Iterable[Row]) -> list[ClaimedJob]:
    """Claimed rows as jobs in claim order: most urgent first, then oldest due
    (RETURNING gives no order)."""
    return sorted(
        (ClaimedJob(*r) for r in rows), key=lambda j: (j.priority, j.available_at, j.id)
    )


def _why_unchanged(rows: list[Row]) -> Unchanged:
    """``job_held_state``'s answer: ``"lost"``, ``"cancelled"`` or ``"limit"``."""
    if not rows:
        return "lost"
    return "cancelled" if rows[0][0] is not None else "limit"


def _reap_key(job: ExpiredJob) -> dict[str, Any]:
    return {"id": job.id, "holder": job.holder, "attempts": job.attempts}


def timed(outcome: Outcome, started: float) -> HandoffResult:
    claimed, handed_off, failed, traces = outcome
    return HandoffResult(
        claimed=claimed,
        handed_off=handed_off,
        quarantined=len(failed),
        ms=round((time.perf_counter() - started) * 1000, 2),
        quarantined_ids=failed,
        trace_contexts=traces,
    )


def _traces(stored: Iterable[Any]) -> tuple[str, ...]:
    """The recorded trace contexts among ``stored`` (NULLs dropped)."""
    return tuple(str(s) for s in stored if s)
