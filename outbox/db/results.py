"""The driver's job-result operations (``outbox.results``). ``SharedDriver`` inherits them.

A kept result is written in the transaction that settles its job: with the
acknowledgement (``result_ack``), with the move to the dead letters
(``result_dead_letter``) or in a transactional handler's own commit
(``result_write_in_tx``), so a result exists exactly when its job is settled. Jobs that
keep no result never reach these operations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from outbox.db import workflows
from outbox.db.caller import Plan, drive
from outbox.db.driver import Executor, Row
from outbox.db.rows import (
    Failure,
    JobDeadLetter,
    JobFence,
    KeptResult,
    QueuedState,
    StoredResult,
    has_ordering_key,
)
from outbox.ids import is_node_id


def kept_plan(kept: KeptResult) -> Plan[None]:
    """The result, replacing an old one; for a workflow node's success, its dependents
    made due too (a node always keeps its result, so its acknowledgement comes here)."""
    params = kept.params()
    yield ("result_delete", {"message_id": params["message_id"]})
    yield ("result_insert", params)
    if kept.failure is None and is_node_id(kept.job.message_id):
        yield from workflows.succeeded(kept.job.message_id)


def _write(c: Executor, kept: KeptResult) -> None:
    drive(kept_plan(kept), c)


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


class ResultOps:
    conn: Executor
    _move_to_dead: Callable[[Executor, str, dict[str, Any], Failure, bool, str | None], bool]
    _ack_ordered_in_tx: Callable[[JobFence], set[int]]
    _fence_params: Callable[[JobFence], dict[str, Any]]

    def result_ack(self, fence: JobFence, kept: Sequence[KeptResult]) -> set[int]:
        """``job_ack(fence)`` and, for each job it acknowledged, its result, in one
        transaction."""
        if not fence.jobs:
            return set()

        def both(c: Executor) -> set[int]:
            if has_ordering_key(fence):  # the keys' turns passed on, as job_ack does
                acked = self._ack_ordered_in_tx(fence)
            else:
                acked = {int(r[0]) for r in c.execute("job_ack", self._fence_params(fence))}
            for k in kept:
                if k.job.id in acked:
                    _write(c, k)
            return acked

        return self.conn.transact(both, operation="ack")

    def result_dead_letter(self, p: JobDeadLetter, kept: KeptResult) -> bool:
        """``job_dead_letter(p)`` with the failed result, in one transaction."""
        key = {"id": p.job.id, "holder": p.holder, "attempts": p.job.attempts}

        def both(c: Executor) -> bool:
            okey = p.job.ordering_key  # locked before the job is taken (_move_to_dead)
            if not self._move_to_dead(c, "job_dead_take", key, p.failure, p.hold_key, okey):
                return False
            _write(c, kept)
            return True

        return self.conn.transact(both, operation="dead_letter")

    def result_write_in_tx(self, kept: KeptResult) -> None:
        """The result inside the caller's open transaction (a transactional handler's)."""
        _write(self.conn, kept)

    def result_get(self, message_id: str) -> StoredResult | None:
        rows: list[Row] = self.conn.read(
            lambda c: c.execute("result_get", {"message_id": message_id}), operation="result"
        )
        if not rows:
            return None
        r = rows[0]
        return StoredResult(
            str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]),
            None if r[5] is None else str(r[5]), int(r[6]), int(r[7]), _int(r[8]),
            int(r[9]), None if r[10] is None else str(r[10]),
            None if r[11] is None else str(r[11]), None if r[12] is None else str(r[12]),
        )

    def result_job_state(self, message_id: str) -> QueuedState | None:
        rows: list[Row] = self.conn.read(
            lambda c: c.execute("result_job_state", {"message_id": message_id}),
            operation="result",
        )
        if not rows:
            return None
        r = rows[0]
        return QueuedState(
            str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), int(r[5]), _int(r[6]),
            None if r[7] is None else str(r[7]),
        )

    def result_prune(self, batch: int) -> int:
        """Delete at most ``batch`` results past their retention; how many went."""
        return self.conn.atomic(
            lambda c: c.execute_count("result_prune", {"batch": batch}), operation="prune"
        )
