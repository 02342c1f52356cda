"""Running one job's handler and turning what happened into an ``Outcome``.

Sync handlers run on a fixed set of threads per queue that take jobs straight from
the queue's local buffer, so a busy worker hands jobs over without waking the
dispatcher for each one. Async handlers run as tasks on one event-loop thread, bounded
by a semaphore per queue. Either way the outcome goes onto one results queue that the
dispatcher drains in batches (acknowledgements are one DELETE per batch).

A ``TypeError`` or ``ValueError`` raised *by the call itself* (the handler does not
accept ``(payload, ctx)``, or the payload does not fit the dataclass its first
parameter is annotated with) is a permanent failure: running it again cannot help.
The same errors raised inside the handler are ordinary failures.

With a tracer provider set, each attempt runs inside its span (``outbox.tracing.attempt``),
whose parent is the context recorded with the job; the SQL worker, the JetStream lane
and ``outbox.testing`` all reach it here, through ``run_sync``/``run_async``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import time
import traceback
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from queue import Empty, SimpleQueue
from typing import Any

import orjson

from outbox import tracing
from outbox.db.connection import Connection, Database
from outbox.db.errors import is_retryable
from outbox.db.rows import ClaimedJob, Failure, JobFence, KeptResult
from outbox.db.workflows import parent_results
from outbox.errors import ConfigurationError, OutboxError, PermanentFailure, Snooze
from outbox.hooks import NO_HOOKS, Hooks
from outbox.ids import is_node_id
from outbox.job import sealing
from outbox.queue.context import JobContext
from outbox.queue.registry import Handler, Registry
from outbox.queue.results_view import NO_RESULTS, DependencyResults
from outbox.results import InvalidResult, kept_ms
from outbox.results import encode as encode_result


class JobTimeout(Exception):
    """The handler ran past its job's ``timeout``."""


class Kind(Enum):
    DONE = "done"  # ran; acknowledge it
    ACKED = "acked"  # transactional: acknowledged in the handler's own commit
    FAILED = "failed"
    PERMANENT = "permanent"
    LOST = "lost"  # transactional: the lease was gone at commit time; rolled back
    UNSTARTED = "unstarted"  # taken from the buffer after stop was asked
    SNOOZED = "snoozed"  # the handler raised Snooze: back later, attempt given back
    CANCELLED = "cancelled"  # an async handler cancelled because an operator cancelled the job


@dataclasses.dataclass(slots=True)
class Outcome:
    kind: Kind
    job: ClaimedJob
    failure: Failure | None = None
    ran_s: float | None = None  # how long the handler ran, when it ran
    snooze_s: float | None = None  # Kind.SNOOZED: the seconds the handler asked for
    result: str | None = None  # Kind.DONE of a handler that keeps its result: the JSON


class _HandlerRaised(OutboxError):
    """Carries a handler's exception through ``Connection.transact`` untouched."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _LeaseLost(OutboxError):
    pass


def class_name(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


UNPRINTABLE = "<the exception's str() raised>"
_SEALED = sealing.MARKER


def failure_of(exc: BaseException) -> Failure:
    """The failure a handler's exception becomes: its class, message and traceback. An
    exception that cannot print itself (its ``__str__`` raises) must still settle its job
    (retried or dead-lettered under its own class); the message then says so."""
    trace = "".join(traceback.format_exception(exc))
    try:
        message = str(exc)
    except Exception:
        message = UNPRINTABLE
    # Both may quote the payload: sealed like it when encryption is on (outbox.job.sealing).
    return Failure(class_name(exc), sealing.seal(message), sealing.seal(trace))


def _binder(fn: Callable[..., Any]) -> Callable[[Any], Any] | None:
    """A converter from decoded JSON to the type the payload parameter names: a typed
    job's type (``outbox.job.typed``: upgraded from an older version, then validated), or
    any other dataclass."""
    try:
        hints = typing.get_type_hints(fn)
        first = next(iter(inspect.signature(fn).parameters))
    except Exception:
        return None
    cls = hints.get(first)
    spec = getattr(cls, "__outbox_job__", None)
    if spec is not None:  # duck-typed: outbox.job.typed sits above this module
        load: Callable[[Any], Any] = spec.load
        return load
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return None
    make: Callable[..., Any] = cls

    def bind(payload: Any) -> Any:
        return make(**payload) if isinstance(payload, dict) else make(payload)

    return bind


class Runner:
    """Calls handlers; shared by the sync threads and the async loop.

    ``system`` is the attempt span's ``messaging.system``: ``outbox`` for the SQL queue,
    ``nats`` on JetStream (its worker sets it).
    """

    system = tracing.SQL_SYSTEM

    def __init__(
        self, registry: Registry, worker_id: str, database: Database, hooks: Hooks = NO_HOOKS
    ) -> None:
        self.registry = registry
        self.hooks = hooks
        self.worker_id = worker_id
        self.database = database
        self._binders = {n: _binder(h.fn) for n in registry if (h := registry.get(n))}
        self._local = threading.local()
        # Ids of held jobs an operator cancelled (the dispatcher adds them after a
        # heartbeat; handlers read them through ctx.cancelled). Set membership is atomic.
        self.cancelled: set[int] = set()

    def _prepare(self, job: ClaimedJob) -> Any:
        """Open, decode and bind the payload; a failure here is permanent (a sealed
        payload whose key is missing or whose tag fails is dead-lettered as
        ``MissingKey``/``TamperedPayload``, never run: ``outbox queue retry`` runs it
        once the key is back)."""
        text = job.payload
        payload = orjson.loads(sealing.open_json(text) if text.startswith(_SEALED) else text)
        binder = self._binders.get(job.job_name)
        if binder is not None:
            payload = binder(payload)
        return payload

    def _ctx(self, job: ClaimedJob, conn: Connection | None) -> JobContext:
        # __new__, then __init__ called as a function: calling the class with keywords
        # gathers them into a dict first (CPython's type call), ~0.4 µs of every job.
        ctx = JobContext.__new__(JobContext)
        JobContext.__init__(
            ctx,
            message_id=job.message_id,
            job_name=job.job_name,
            queue=job.queue,
            attempt=job.attempts,
            max_attempts=self.registry.max_attempts(job.job_name, job.max_attempts),
            enqueued_at_ms=job.created_at,
            connection=None if conn is None else conn.raw,
            job_id=job.id,
            cancelled_ids=self.cancelled,
            results=self._results_of(job),
        )
        return ctx

    def _results_of(self, job: ClaimedJob) -> Mapping[str, Any]:
        """A workflow node's dependencies' results, read on first use; none otherwise."""
        if not is_node_id(job.message_id):
            return NO_RESULTS
        read, node_id = self.read_parents, job.message_id
        return DependencyResults(lambda: read(node_id))

    def read_parents(self, node_id: str) -> list[tuple[str, str, str, str | None]]:
        """A node's parents' results (``outbox.testing`` reads them on the test's own
        connection instead)."""
        return parent_results(self.database, node_id)

    def run_sync(self, job: ClaimedJob, handler: Handler) -> Outcome:
        """Run one attempt of ``job``; in its span when tracing is on."""
        if not tracing.enabled():  # the cost when off: one global read
            return self._run_sync(job, handler)
        with self._span(job) as span:
            return _traced(span, self._run_sync(job, handler))

    def _span(self, job: ClaimedJob) -> Any:
        return tracing.attempt(
            self.system, job.queue, job.message_id, job.attempts, job.job_name, job.trace_context
        )

    def _run_sync(self, job: ClaimedJob, handler: Handler) -> Outcome:
        if job.id in self.cancelled:  # cancelled while it waited in the buffer
            return Outcome(Kind.CANCELLED, job)
        self.hooks.job_started(job)
        try:
            payload = self._prepare(job)
        except Exception as exc:
            return Outcome(Kind.PERMANENT, job, failure_of(exc))
        if handler.transactional:
            return self._run_transactional(job, handler, payload)
        try:
            value = handler.fn(payload, self._ctx(job, None))
        except Exception as exc:
            return _failed(job, exc)
        return _done(job, handler, value)

    def _run_transactional(self, job: ClaimedJob, handler: Handler, payload: Any) -> Outcome:
        began = time.monotonic()

        def body(c: Connection) -> None:
            try:
                value = handler.fn(payload, self._ctx(job, c))
                keep_ms = kept_ms(handler.keep_result_ms, job.message_id)
                kept = None if keep_ms is None else encode_result(value)
            except Exception as exc:
                if is_retryable(exc):
                    raise
                raise _HandlerRaised(exc) from exc
            if not c.driver.job_ack_in_tx(JobFence(self.worker_id, [job])):
                raise _LeaseLost()
            if keep_ms is not None:  # in the ack's own transaction
                ran_ms = round((time.monotonic() - began) * 1000)
                c.driver.result_write_in_tx(
                    KeptResult(job, self.worker_id, keep_ms, ran_ms, kept)
                )

        try:
            self._thread_connection().transact(body, operation="transactional job")
        except _HandlerRaised as raised:
            return _failed(job, raised.exc)
        except _LeaseLost:
            return Outcome(Kind.LOST, job)
        except Exception as exc:
            self.close_thread_connection()
            return _failed(job, exc)
        return Outcome(Kind.ACKED, job)

    def _thread_connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.database.connect()
        return conn

    def close_thread_connection(self) -> None:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    async def run_async(self, job: ClaimedJob, handler: Handler) -> Outcome:
        """Run one attempt of ``job`` on the event loop; in its span when tracing is on."""
        if not tracing.enabled():
            return await self._run_async(job, handler)
        with self._span(job) as span:
            return _traced(span, await self._run_async(job, handler))

    async def _run_async(self, job: ClaimedJob, handler: Handler) -> Outcome:
        if job.id in self.cancelled:
            return Outcome(Kind.CANCELLED, job)
        self.hooks.job_started(job)
        try:
            payload = self._prepare(job)
            coro = handler.fn(payload, self._ctx(job, None))
        except Exception as exc:
            return Outcome(Kind.PERMANENT, job, failure_of(exc))
        try:
            if handler.timeout is None:
                value = await coro
            else:
                try:
                    async with asyncio.timeout(handler.timeout):
                        value = await coro
                except TimeoutError as exc:
                    raise JobTimeout(
                        f"the handler ran past its {handler.timeout} s timeout"
                    ) from exc
        except asyncio.CancelledError:
            if job.id not in self.cancelled:
                raise  # the worker is stopping now: the lease expires, as before
            return Outcome(Kind.CANCELLED, job)
        except BaseException as exc:  # SystemExit too: it would stop the loop every job runs on
            return _failed(job, exc)
        return _done(job, handler, value)


def _traced(span: tracing.Attempt, outcome: Outcome) -> Outcome:
    """Mark the attempt's span with how it ended; a failure by its class name only."""
    span.outcome(outcome.kind.value)
    if outcome.failure is not None:
        span.failed(outcome.failure.exception_class)
    return outcome


# Read once: every job that returns is one, and on Python 3.11 each read of an enum
# member calls ``EnumType.__getattr__`` (~70 ns).
_KIND_DONE = Kind.DONE


def _done(job: ClaimedJob, handler: Handler, value: Any) -> Outcome:
    """A handler returned: keep its return value if it keeps results. One that cannot
    be kept (``InvalidResult``) fails the job permanently: running it again returns the
    same kind of value. A coroutine or generator returned is work that never ran (a
    missing ``await``, a sync function returning an async one's call): not done, and
    permanently so, since every attempt would return one again."""
    if value is not None and _unrun(value):
        return Outcome(Kind.PERMANENT, job, failure_of(_unrun_error(handler.name, value)))
    if kept_ms(handler.keep_result_ms, job.message_id) is None:
        return Outcome(_KIND_DONE, job)
    try:
        return Outcome(_KIND_DONE, job, result=encode_result(value))
    except InvalidResult as exc:
        return Outcome(Kind.PERMANENT, job, failure_of(exc))


def _unrun(value: Any) -> bool:
    return inspect.isawaitable(value) or inspect.isgenerator(value) or inspect.isasyncgen(value)


def _unrun_error(name: str, value: Any) -> ConfigurationError:
    if inspect.iscoroutine(value):
        value.close()  # never awaited: closed, not left to warn at garbage collection
    return ConfigurationError(
        f"job {name!r}: the handler returned a {type(value).__name__} instead of running "
        "it; await it in an async def handler"
    )


def _failed(job: ClaimedJob, exc: BaseException) -> Outcome:
    if isinstance(exc, Snooze):
        return Outcome(Kind.SNOOZED, job, snooze_s=exc.seconds)
    if isinstance(exc, (PermanentFailure, InvalidResult)) or _raised_by_the_call(exc):
        return Outcome(Kind.PERMANENT, job, failure_of(exc))
    return Outcome(Kind.FAILED, job, failure_of(exc))


def _raised_by_the_call(exc: BaseException) -> bool:
    """A TypeError/ValueError whose traceback never entered the handler's frame."""
    if not isinstance(exc, (TypeError, ValueError)) or isinstance(exc, OutboxError):
        return False
    tb = exc.__traceback__
    return tb is not None and tb.tb_next is None


STOP = object()


class SyncPool:
    """``size`` daemon threads taking jobs of one queue from ``inbox``."""

    def __init__(
        self,
        name: str,
        size: int,
        runner: Runner,
        results: SimpleQueue[Any],
        stopping: threading.Event,
        started: Callable[[ClaimedJob], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inbox: SimpleQueue[Any] = SimpleQueue()
        self._runner = runner
        self._results = results
        self._stopping = stopping
        self._started = started
        self._clock = clock
        # When each thread's current job started (by ``clock``; 0.0 while idle).
        self.busy_since = [0.0] * size
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"outbox-{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def _loop(self, slot: int) -> None:
        get, put, runner, clock = self.inbox.get, self._results.put, self._runner, self._clock
        while True:
            item = get()
            if item is STOP:
                runner.close_thread_connection()
                return
            job, handler = item
            if self._stopping.is_set():
                put(Outcome(Kind.UNSTARTED, job))
                continue
            if handler.timeout is not None:
                self._started(job)
            began = self.busy_since[slot] = clock()
            try:
                outcome = runner.run_sync(job, handler)
            except BaseException as exc:  # nothing may strand the job's lease (SystemExit too)
                outcome = Outcome(Kind.FAILED, job, failure_of(exc))
            self.busy_since[slot] = 0.0
            outcome.ran_s = clock() - began
            put(outcome)

    def stalled_for(self, now: float) -> float:
        """How long every thread has been busy: 0.0 when any is idle."""
        since = self.busy_since
        if not since or 0.0 in since:
            return 0.0
        return now - max(since)

    def waiting(self) -> int:
        """Jobs handed to this pool that no thread has started."""
        return self.inbox.qsize()

    def drain(self) -> list[tuple[ClaimedJob, Handler]]:
        """Take every job no thread has started yet (for a graceful stop)."""
        out: list[tuple[ClaimedJob, Handler]] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except Empty:
                return out
            if item is not STOP:
                out.append(item)

    def close(self) -> None:
        for _ in self._threads:
            self.inbox.put(STOP)


class AsyncPool:
    """One event loop thread; each queue's tasks bounded by its own semaphore."""

    def __init__(
        self,
        caps: dict[str, int],
        runner: Runner,
        results: SimpleQueue[Any],
        stopping: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._results = results
        self._stopping = stopping
        self._clock = clock
        self._loop = asyncio.new_event_loop()
        self._caps = caps
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: set[asyncio.Task[None]] = set()
        self._by_job: dict[int, asyncio.Task[None]] = {}
        self._thread = threading.Thread(target=self._run, name="outbox-async", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._sems = {q: asyncio.Semaphore(n) for q, n in self._caps.items()}
        self._loop.run_forever()

    def submit(self, jobs: list[tuple[ClaimedJob, Handler]]) -> None:
        """Hand a whole batch over with one wake-up of the loop."""
        self._loop.call_soon_threadsafe(self._start, jobs)

    def _start(self, jobs: list[tuple[ClaimedJob, Handler]]) -> None:
        for job, handler in jobs:
            task = self._loop.create_task(self._one(job, handler))
            self._tasks.add(task)
            self._waiting.add(task)
            self._by_job[job.id] = task
            task.add_done_callback(self._tasks.discard)

    async def _one(self, job: ClaimedJob, handler: Handler) -> None:
        try:
            await self._one_in_slot(job, handler)
        finally:
            self._by_job.pop(job.id, None)

    async def _one_in_slot(self, job: ClaimedJob, handler: Handler) -> None:
        sem = self._sems[job.queue]
        try:
            await sem.acquire()
        except asyncio.CancelledError:
            self._results.put(Outcome(Kind.UNSTARTED, job))
            return
        task = asyncio.current_task()
        if task is not None:
            self._waiting.discard(task)
        try:
            if self._stopping.is_set():
                self._results.put(Outcome(Kind.UNSTARTED, job))
                return
            began = self._clock()
            outcome = await self._runner.run_async(job, handler)
            outcome.ran_s = self._clock() - began
            self._results.put(outcome)
        finally:
            sem.release()

    def cancel_jobs(self, job_ids: set[int]) -> None:
        """Cancel the running tasks of jobs an operator cancelled (they report
        ``Kind.CANCELLED``); one still waiting for a slot does not start its handler."""

        def cancel() -> None:
            for job_id in job_ids:
                task = self._by_job.get(job_id)
                if task is not None and task not in self._waiting:
                    task.cancel()

        self._loop.call_soon_threadsafe(cancel)

    def release_waiting(self) -> None:
        """Graceful stop: tasks still waiting for a slot report themselves unstarted."""

        def cancel_waiting() -> None:
            for t in list(self._waiting):
                t.cancel()

        self._loop.call_soon_threadsafe(cancel_waiting)

    def cancel_all(self) -> None:
        """Second signal or grace over: cancel running tasks (their leases expire)."""

        def cancel() -> None:
            for t in list(self._tasks):
                t.cancel()

        self._loop.call_soon_threadsafe(cancel)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
