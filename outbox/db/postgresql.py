"""PostgreSQL: the hot paths in one statement each, and LISTEN/NOTIFY wake-ups.

``job_ack_claim`` acknowledges and claims in one round trip; ``outbox_handoff`` locks,
verifies, copies and marks a whole batch in one statement (``relay_handoff``), falling
back to the step-by-step batch with Python verification when a payload is not JSON
(the ``::json`` cast raises instead of answering); a broker target's claim
(``relay_claim_checked``) falls back the same way.

Connections (psycopg 3) run in autocommit; behind a transaction pooler
(``OUTBOX_POOLER``) no statement is prepared, since it would outlive the pooler's
transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from outbox.config import settings
from outbox.db import ordering, ring
from outbox.db.adapters import psycopg_has_rows
from outbox.db.dialect import POSTGRESQL
from outbox.db.driver import (
    JOBS_CHANNEL,
    RELAY_CHANNEL,
    Backend,
    ConnectOptions,
    Executor,
)
from outbox.db.errors import INVALID_TEXT, error_code
from outbox.db.rows import (
    ClaimedJob,
    HandoffResult,
    JobClaim,
    JobFence,
    OutboxHandoff,
    StoredIntent,
    has_ordering_key,
)
from outbox.db.shared import (
    Outcome,
    SharedDriver,
    claim_params,
    claimed_jobs,
    timed,
)
from outbox.db.url import URL, postgresql_args
from outbox.errors import DatabaseError, OutboxError
from outbox.log import get_logger

log = get_logger("outbox.relay")

_LISTEN = {RELAY_CHANNEL: "listen_relay", JOBS_CHANNEL: "listen_jobs"}


def _int_array(values: list[int]) -> str:
    """A PostgreSQL array literal of integers: ``[1, 22]`` → ``'{1,22}'``."""
    return "{" + ",".join(map(str, values)) + "}"


class _NeedsPythonVerify(OutboxError):
    """The one-statement batch met a payload its SQL cannot check; it was rolled back."""


class PostgresqlDriver(SharedDriver):
    dialect = POSTGRESQL

    def __init__(self, conn: Executor) -> None:
        super().__init__(conn)
        self._ring: bool | None = None  # outbox_jobs is the ring (outbox.db.ring)?

    def on_ring(self) -> bool:
        """Asked once per connection."""
        if self._ring is None:
            self._ring = bool(self._read("queue storage", "ring_installed")[0][0])
        return self._ring

    def ring_rotate(self) -> str | None:
        try:
            answer = str(self._one("ring rotate", "ring_rotate", ring.rotate_params())[0][0])
        except DatabaseError as exc:  # the claim goes on; the next pass tries again
            log.warning("queue.ring_rotate_failed", error=type(exc).__name__)
            return None
        if answer == "rotated":
            log.debug("queue.ring_rotated")
        return answer

    def listen_statement(self, channel: str) -> str:
        try:
            return _LISTEN[channel]
        except KeyError:
            raise DatabaseError(f"no channel {channel!r}", operation="listen") from None

    def job_ack_claim(self, done: JobFence, claim: JobClaim) -> tuple[set[int], list[ClaimedJob]]:
        if not done.jobs:
            return set(), self.job_claim(claim)
        params = {**self._fence_params(done), **claim_params(claim)}
        if has_ordering_key(done):  # the keys' rows locked, then one statement (below)
            keys = _keys(done)
            claim_keyed = {**params, "keys": keys}
            steps = [*ordering.lock(keys), ("ordering_ack_claim", claim_keyed)]
            rows = self.conn.transact_at_once(steps, operation="claim")
        else:
            rows = self._one("claim", "job_ack_claim", params)
        acked = {int(r[0]) for r in rows if r[1] is None}
        return acked, claimed_jobs(r for r in rows if r[1] is not None)

    def job_ack(self, fence: JobFence) -> set[int]:
        if not fence.jobs or not has_ordering_key(fence):
            return super().job_ack(fence)
        rows = self.conn.transact_at_once(self._ack_ordered_steps(fence), operation="ack")
        return {int(r[0]) for r in rows}

    def _ack_ordered_steps(self, fence: JobFence) -> list[tuple[str, Mapping[str, Any]]]:
        """An acknowledgement of jobs some of which have an ordering key in two
        statements: the keys' rows locked (``outbox.db.ordering.lock``), then the delete
        and the keys' turns passed on in one (``ordering_ack_leave``), whose snapshot,
        taken after the lock, sees what the lock waited for."""
        keys = _keys(fence)
        leave = {**self._fence_params(fence), "keys": keys}
        return [*ordering.lock(keys), ("ordering_ack_leave", leave)]

    def _ack_ordered_in_tx(self, fence: JobFence) -> set[int]:
        """``_ack_ordered_steps`` inside the caller's transaction."""
        rows = [self.conn.execute(n, p) for n, p in self._ack_ordered_steps(fence)]
        return {int(r[0]) for r in rows[-1]}

    def _fence_params(self, fence: JobFence) -> dict[str, Any]:
        """The fence's ids and attempts as array literals (``{1,2,3}``), which the
        statements CAST to bigint[] and integer[] as they would lists: psycopg dumps a
        list element by element in Python (~0.8 µs each, two for every acknowledged
        job), a str as it is."""
        params = fence.params()
        params["ids"] = _int_array(params["ids"])
        params["attempts"] = _int_array(params["attempts"])
        return params

    def _notify_jobs_in_tx(self) -> None:
        self.conn.execute("relay_notify")

    def outbox_handoff(
        self, p: OutboxHandoff, verify: Callable[[StoredIntent], str | None]
    ) -> HandoffResult:
        if p.verify_in_python:
            return super().outbox_handoff(p, verify)
        started = time.perf_counter()
        try:
            outcome = self._transact("relay batch", lambda c: self._in_one_statement(c, p))
        except _NeedsPythonVerify:
            log.info("relay.verify_fallback", cause="payload_not_json")
            return super().outbox_handoff(
                OutboxHandoff(p.batch_size, p.notify, verify_in_python=True), verify
            )
        return timed(outcome, started)

    def outbox_handoff_published(
        self,
        p: OutboxHandoff,
        verify: Callable[[StoredIntent], str | None],
        publish: Callable[[list[StoredIntent]], set[str]],
    ) -> HandoffResult:
        try:  # the Python verifier's claim never raises this: one path serves both
            return super().outbox_handoff_published(p, verify, publish)
        except _NeedsPythonVerify:  # raised by the claim, before anything was published
            log.info("relay.verify_fallback", cause="payload_not_json")
            python = OutboxHandoff(p.batch_size, p.notify, verify_in_python=True)
            return super().outbox_handoff_published(python, verify, publish)

    def outbox_claim_checked_in_tx(self, p: OutboxHandoff) -> list[tuple[StoredIntent, str | None]]:
        try:
            return super().outbox_claim_checked_in_tx(p)
        except Exception as exc:
            if error_code(exc) == INVALID_TEXT:
                raise _NeedsPythonVerify() from exc
            raise


    def _in_one_statement(self, conn: Executor, p: OutboxHandoff) -> Outcome:
        params: dict[str, Any] = {"batch_size": p.batch_size, "notify": p.notify}
        try:
            rows = conn.execute("relay_handoff", params)
        except Exception as exc:
            if error_code(exc) == INVALID_TEXT:
                raise _NeedsPythonVerify() from exc
            raise
        claimed, handed_off, failed_ids, reasons, _woken, moved, traces = rows[0]
        if moved != handed_off:  # rows are locked by this statement: a broken invariant
            raise DatabaseError(
                f"relay batch aborted: {moved} rows left the outbox,"
                f" {handed_off} reached the queue",
                operation="relay batch",
            )
        failed = tuple(zip(failed_ids or (), reasons or (), strict=True))
        return int(claimed), int(handed_off), failed, tuple(traces or ())


def _keys(fence: JobFence) -> list[str]:
    """The ordering keys of ``fence``'s jobs, sorted (the order their rows are locked in)."""
    return sorted({str(j.ordering_key) for j in fence.jobs if j.ordering_key is not None})


def connector(url: URL, options: ConnectOptions) -> Callable[[], Any]:
    args = postgresql_args(url)

    def connect() -> Any:
        import psycopg

        extra: dict[str, Any] = {"prepare_threshold": None} if settings.pooler else {}
        return psycopg.connect(autocommit=True, **args, **extra)

    return connect


def begin(raw: Any) -> None:
    raw.execute("BEGIN")


def commit(raw: Any) -> None:
    raw.execute("COMMIT")


def rollback(raw: Any) -> None:
    raw.execute("ROLLBACK")


def pipeline(raw: Any) -> AbstractContextManager[Any]:
    """psycopg's pipeline mode, where its libpq has one (14 and later; else one statement
    at a time, the same transaction)."""
    import psycopg

    return raw.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


BACKEND = Backend(
    POSTGRESQL, connector, begin, commit, rollback, psycopg_has_rows, PostgresqlDriver,
    pipeline=pipeline,
)
