"""``run_pending``: relay and run every due job on the test's own connection.

It is the product's path with the processes folded into the caller's transaction:
``record()``/``push()``/``emit()`` wrote real rows; here the pending intents are
handed to the queue table, the due jobs are run by the worker's own ``Runner``
(payload decoding, dataclass binding, ``PermanentFailure``, retries with the handler's
backoff, dead letters), and the rows change as the worker would change them. All of it
happens inside the test's transaction, so a rollback-per-test fixture undoes it.

What "due" means comes from the ``Clock`` passed (frozen until advanced); without one,
from the database's clock. With a clock, the registry's periodic jobs are ticked too:
every tick since the clock's previous ``run_pending`` is recorded (``all`` catch-up).

What follows an attempt is the worker's own policy (``outbox.queue.policy``).
Differences from a worker, on purpose: each job runs inside a savepoint (so a failing
handler's writes roll back while the test's transaction goes on), a transactional
handler's ``ctx.connection`` is the test's own DB-API connection (the kind of object a
worker passes: ``sqlite3``, psycopg or PyMySQL), a retry waits the backoff's full bound
(no jitter, so tests are repeatable), ``timeout`` is not enforced, and snoozes are not
counted against ``MAX_SNOOZES``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outbox.db import caller, ordering, workflows
from outbox.db.adapters import Target, adapt
from outbox.db.connection import Connection, Database
from outbox.db.results import kept_plan
from outbox.db.rows import ClaimedJob, Failure, KeptResult
from outbox.errors import ConfigurationError
from outbox.ids import is_node_id
from outbox.job import scheduler_keys
from outbox.queue.execute import Outcome, Runner
from outbox.queue.policy import UNKNOWN_FAILURE, Action, decide
from outbox.queue.registry import Handler, Registry
from outbox.record import record
from outbox.results import kept_ms
from outbox.schedule.store import job_of
from outbox.testing.clock import Clock

MAX_ROUNDS = 100
_WORKER_ID = "outbox-testing"


@dataclass(frozen=True, slots=True)
class Ran:
    """One job run by ``run_pending``: ``outcome`` is ``done``, ``retry``, ``dead`` or
    ``snoozed`` (the handler raised ``Snooze``: due again after its seconds by the test's
    clock, no attempt spent)."""

    job_name: str
    message_id: str
    attempt: int
    outcome: str
    error: str | None = None  # the exception class, as the worker records it


@dataclass(slots=True)
class Report:
    """What one ``run_pending`` did, in order."""

    ran: list[Ran] = field(default_factory=list)
    ticks: int = 0  # periodic ticks recorded
    unknown: list[str] = field(default_factory=list)  # due jobs no handler here knows

    def of(self, outcome: str) -> list[Ran]:
        """The jobs that ran with this outcome (``"done"``, ``"retry"``, ``"dead"``, ...)."""
        return [r for r in self.ran if r.outcome == outcome]

    @property
    def done(self) -> int:
        """How many jobs ran to success."""
        return len(self.of("done"))

    @property
    def failed(self) -> int:
        """How many jobs ran and did not succeed (retried, snoozed or dead-lettered)."""
        return len(self.ran) - self.done

    def __len__(self) -> int:
        return len(self.ran)


_configured: dict[str, Registry] = {}


def use(registry: Registry) -> None:
    """Make ``registry`` the default of ``run_pending`` and eager mode (the pytest plugin
    calls this with the ``outbox_registry`` ini setting)."""
    _configured["registry"] = registry


def default_registry() -> Registry:
    try:
        return _configured["registry"]
    except KeyError:
        raise ConfigurationError(
            "no registry: pass one, or set outbox_registry = MODULE:ATTR in the pytest ini"
        ) from None


def run_pending(
    conn: Any,
    registry: Registry | None = None,
    *,
    clock: Clock | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> Report:
    """Relay every pending intent and run every due job, on ``conn`` in its transaction.

    Repeats while jobs ran (a handler may record more), at most ``max_rounds`` times.
    ``conn`` is any connection ``record()`` accepts (sync), Django's ``connection``
    included. Returns a ``Report``.
    """
    reg = registry if registry is not None else default_registry()
    target = adapt(conn)
    report = Report()
    if clock is not None:
        report.ticks = _tick_schedules(conn, reg, clock)
    # The worker's own Runner; its database serves only transactional handlers, which
    # run on the test's connection here instead (_execute), so it is never connected.
    runner = Runner(reg, _WORKER_ID, Database("sqlite://"))
    runner.read_parents = lambda node_id: caller.run(  # type: ignore[method-assign]
        workflows.parents_plan(node_id), target, "run_pending"
    )
    wrapped = Connection(_dbapi(conn), target.dialect)
    skip: set[int] = set()
    for _ in range(max_rounds):
        now_ms = clock.ms() if clock is not None else _db_now(target)
        _handoff(target, now_ms)
        due = [j for j in _due(target, now_ms) if j.id not in skip]
        if not due:
            return report
        for job in due:
            handler = reg.get(job.job_name)
            if handler is None:
                skip.add(job.id)
                report.unknown.append(job.job_name)
                continue
            report.ran.append(_run_one(target, runner, wrapped, job, handler, reg, now_ms))
    raise RuntimeError(
        f"run_pending: jobs were still due after {max_rounds} rounds; does a handler record "
        "a job that is due at once, every time it runs?"
    )


def _q(target: Target, name: str, params: Mapping[str, Any] | None = None) -> list[Any]:
    return caller.run(caller.harness_step(name, params or {}), target, "run_pending")


def _db_now(target: Target) -> int:
    return int(_q(target, "now_ms")[0][0])


def _handoff(target: Target, now_ms: int) -> None:
    top = _q(target, "testing_pending_max")[0][0]
    if top is None:
        return
    params = {"max_id": int(top), "now_ms": now_ms}
    keyed = _q(target, "testing_pending_ordered", params)
    waits = _line(target, ordering.enter([str(k) for _, k in keyed])) if keyed else []
    _q(target, "testing_handoff", params)
    _line(target, ordering.block(str(m) for (m, _), w in zip(keyed, waits, strict=True) if w))
    _q(target, "testing_delete_moved", params)


def _line(target: Target, plan: caller.Plan[Any]) -> Any:
    """An ordering-key step (``outbox.db.ordering``), the relay's and worker's own."""
    return caller.run(plan, target, "run_pending")


def _due(target: Target, now_ms: int) -> list[ClaimedJob]:
    rows = _q(target, "testing_due", {"now_ms": now_ms})
    return [
        ClaimedJob(
            id=int(r[0]),
            message_id=str(r[1]),
            queue=str(r[2]),
            job_name=str(r[3]),
            payload=str(r[4]),
            attempts=int(r[5]) + 1,  # the claim counts the attempt
            max_attempts=r[6],
            created_at=int(r[7]),
            available_at=now_ms,
            trace_context=r[8],
            ordering_key=None if r[9] is None else str(r[9]),
        )
        for r in rows
    ]


def _run_one(
    target: Target,
    runner: Runner,
    wrapped: Connection,
    job: ClaimedJob,
    handler: Handler,
    registry: Registry,
    now_ms: int,
) -> Ran:
    """Run ``job`` in a savepoint and write the policy's decision (``outbox.queue.policy``)
    as the worker would; a retry waits the backoff's bound (``jitter=False``)."""
    _q(target, "testing_savepoint")
    outcome = _execute(runner, wrapped, job, handler)
    decision = decide(
        outcome,
        max_attempts=registry.max_attempts(job.job_name, job.max_attempts),
        backoff=handler.backoff,
        now_ms=now_ms,
        jitter=False,
    )
    if decision.action is Action.ACK:
        _q(target, "testing_release_job")
        _q(target, "testing_done", {"id": job.id})
        _keep(target, job, handler, result=outcome.result)
        if is_node_id(job.message_id):  # its dependents made due (outbox.db.workflows)
            _q(target, "testing_workflow_due", {"node_id": job.message_id, "now_ms": now_ms})
        _pass_turn(target, job)
        return Ran(job.job_name, job.message_id, job.attempts, "done")
    _q(target, "testing_rollback_job")
    _q(target, "testing_release_job")
    if decision.action in (Action.SNOOZE, Action.RELEASE):  # the attempt given back
        back = {"id": job.id, "attempts": job.attempts - 1, "error": None}
        _q(target, "testing_retry", {**back, "available_at": decision.due_ms or now_ms})
        return Ran(job.job_name, job.message_id, job.attempts, "snoozed")
    failure = decision.failure or UNKNOWN_FAILURE
    error = failure.exception_class
    if decision.action is Action.RETRY:
        params = {
            "id": job.id,
            "attempts": job.attempts,
            "available_at": decision.due_ms,
            "error": error[:200],
        }
        _q(target, "testing_retry", params)
        return Ran(job.job_name, job.message_id, job.attempts, "retry", error)
    dead = {
        "id": job.id,
        "attempts": job.attempts,
        "exception_class": error[:200],
        "exception_message": failure.message,
        "exception_trace": failure.trace,
        "now_ms": now_ms,
        "hold_key": int(handler.dead_letter_holds_key),
    }
    _q(target, "testing_dead", dead)
    _q(target, "testing_done", {"id": job.id})
    _keep(target, job, handler, failure=failure)
    if is_node_id(job.message_id):
        caller.run(workflows.failed(job.message_id), target, "run_pending")
        _q(target, "testing_workflow_due", {"node_id": job.message_id, "now_ms": now_ms})
    if not handler.dead_letter_holds_key:
        _pass_turn(target, job)
    return Ran(job.job_name, job.message_id, job.attempts, "dead", error)


def _keep(
    target: Target,
    job: ClaimedJob,
    handler: Handler,
    *,
    result: str | None = None,
    failure: Failure | None = None,
) -> None:
    """The job's result, as the worker's acknowledgement or dead letter writes it, when
    its handler keeps one (``keep_result``) or it is a workflow node (``kept_ms``)."""
    keep = kept_ms(handler.keep_result_ms, job.message_id)
    if keep:
        kept = KeptResult(job, _WORKER_ID, keep, 0, result, failure)
        caller.run(kept_plan(kept), target, "run_pending")


def _pass_turn(target: Target, job: ClaimedJob) -> None:
    """A job that left the queue passes its ordering key's turn on, as in the worker."""
    if job.ordering_key is not None:
        _line(target, ordering.leave([job.ordering_key]))


def _execute(runner: Runner, wrapped: Connection, job: ClaimedJob, handler: Handler) -> Outcome:
    """The worker's ``Runner`` runs it; a transactional handler gets the test's connection."""
    if handler.transactional:
        handler = dataclasses.replace(
            handler, transactional=False, fn=_with_connection(handler.fn, wrapped)
        )
    if not handler.is_async:
        return runner.run_sync(job, handler)
    return _run_coroutine(lambda: runner.run_async(job, handler))


def _with_connection(fn: Callable[..., Any], conn: Connection) -> Callable[..., Any]:
    """The handler gets the test's DB-API connection, the object a worker gives it
    (``JobContext.connection``), so code that runs under a test runs under a worker."""

    def call(payload: Any, ctx: Any) -> Any:
        ctx.connection = conn.raw
        return fn(payload, ctx)

    return call


def _run_coroutine(make: Callable[[], Any]) -> Outcome:
    """``asyncio.run``, on a thread of its own when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        result: Outcome = asyncio.run(make())
        return result
    box: list[Outcome] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(make())))
    thread.start()
    thread.join()
    return box[0]


def _tick_schedules(conn: Any, registry: Registry, clock: Clock) -> int:
    """Record every periodic tick in (the clock's last look, now] on ``conn``."""
    after = datetime.fromtimestamp(clock.ticked_until, UTC)
    now = clock.now()
    count = 0
    with scheduler_keys():
        for entry in registry.schedules:
            for tick in entry.ticks(after, now):
                record(conn, entry.key(tick), job_of(entry))
                count += 1
    clock.ticked_until = clock()
    return count


def _dbapi(conn: Any) -> Any:
    """The DB-API connection under ``conn`` (what a transactional handler writes on)."""
    module = type(conn).__module__
    if module.startswith("django."):  # Django's connection (proxy) or connections[alias]
        from django.db import connections

        wrapper = connections[conn.alias]
        wrapper.ensure_connection()
        return wrapper.connection
    if module.startswith("sqlalchemy."):
        from sqlalchemy.orm import Session, scoped_session

        if isinstance(conn, scoped_session):
            conn = conn()
        if isinstance(conn, Session):
            conn = conn.connection()
        return conn.connection.dbapi_connection
    return conn
