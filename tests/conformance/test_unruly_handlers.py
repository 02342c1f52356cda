"""A handler that raises what handlers should not still only fails its own attempt.

``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` raised by a handler, and an
exception that cannot print itself (its ``__str__`` raises), sync and async. Each job is
dead-lettered (one attempt) under its own class, and the jobs beside it run. Before the
fix an async handler's ``SystemExit`` stopped the event loop every async job runs on, so
those jobs sat claimed and never ran, and an unprintable exception from an async handler
left its job settled by nobody ("Task exception was never retrieved"). From a sync
handler, an unprintable exception was dead-lettered as ``RuntimeError``.

Handlers that would leave their work unrun: an object whose ``__call__`` is ``async def``
is awaited (it was called as a sync handler, its coroutine dropped, the job counted done);
a handler that returns a coroutine (a missing ``await``) is not done but dead-lettered at
once; a generator function, whose body a call never runs, is refused at registration, and
so is a handler whose signature cannot take ``(payload, ctx)`` (it dead-lettered every job).
"""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job, Registry, Worker, WorkerConfig
from outbox.db.connection import Connection, Database
from outbox.queue import JobContext, push
from outbox.queue.execute import UNPRINTABLE

RAISED: dict[str, BaseException] = {
    "exit": SystemExit(3),
    "interrupt": KeyboardInterrupt(),
    "generator_exit": GeneratorExit(),
}


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot print itself")


def _registry() -> Registry:
    registry = Registry()
    for name in RAISED:
        registry.job(f"sync.{name}", max_attempts=1)(_raiser(name))
        registry.job(f"async.{name}", max_attempts=1)(_async_raiser(name))
    registry.job("sync.unprintable", max_attempts=1)(_unprintable)
    registry.job("async.unprintable", max_attempts=1)(_async_unprintable)
    registry.job("sync.ok")(_ok)
    registry.job("async.ok")(_async_ok)
    return registry


def _raiser(name: str) -> Any:
    def handler(payload: Any, ctx: JobContext) -> None:
        raise RAISED[name]

    return handler


def _async_raiser(name: str) -> Any:
    async def handler(payload: Any, ctx: JobContext) -> None:
        raise RAISED[name]

    return handler


def _unprintable(payload: Any, ctx: JobContext) -> None:
    raise Unprintable


async def _async_unprintable(payload: Any, ctx: JobContext) -> None:
    raise Unprintable


def _ok(payload: Any, ctx: JobContext) -> None:
    pass


async def _async_ok(payload: Any, ctx: JobContext) -> None:
    pass


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_each_unruly_job_dead_letters_under_its_class_and_the_others_run(
    database: Database, conn: Connection, app_conn: Any, kind: str
) -> None:
    names = [*RAISED, "unprintable"]
    for name in names:
        push(app_conn, Job(f"{kind}.{name}", {}))
        push(app_conn, Job(f"{kind}.ok", {}))  # beside each: it must still run
    app_conn.commit()
    with Worker(database, _registry(), WorkerConfig(concurrency=4)) as worker:
        while worker.run_once():
            pass
    stats = worker.stats
    assert (stats.succeeded, stats.dead, stats.claimed) == (len(names), len(names), 2 * len(names))
    dead = {
        str(job): (str(cls), msg)
        for job, cls, msg in conn.execute_sql(
            "SELECT job_name, exception_class, exception_message FROM outbox_failed_jobs"
        )
    }
    assert dead == {
        f"{kind}.exit": ("SystemExit", "3"),
        f"{kind}.interrupt": ("KeyboardInterrupt", ""),
        f"{kind}.generator_exit": ("GeneratorExit", ""),
        f"{kind}.unprintable": (f"{__name__}.Unprintable", UNPRINTABLE),
    }
    (left,) = conn.execute_sql("SELECT count(*) FROM outbox_jobs")
    assert int(left[0]) == 0


class AsyncCallable:
    """A handler object whose ``__call__`` is ``async def``: awaited, like an async def."""

    def __init__(self) -> None:
        self.ran = 0

    async def __call__(self, payload: Any, ctx: JobContext) -> None:
        self.ran += 1


async def _later() -> None:
    pass


def _returns_a_coroutine(payload: Any, ctx: JobContext) -> Any:
    return _later()  # work handed back, never run


async def _returns_a_coroutine_async(payload: Any, ctx: JobContext) -> Any:
    return _later()  # a missing await


def test_an_async_callable_object_runs_and_an_unawaited_coroutine_is_not_done(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    registry = Registry()
    handler = AsyncCallable()
    registry.job("obj.async")(handler)
    registry.job("ret.sync")(_returns_a_coroutine)  # default max_attempts: still 1 attempt
    registry.job("ret.async")(_returns_a_coroutine_async)
    for name in ("obj.async", "ret.sync", "ret.async"):
        push(app_conn, Job(name, {}))
    app_conn.commit()
    with Worker(database, registry, WorkerConfig()) as worker:
        while worker.run_once():
            pass
    assert handler.ran == 1
    assert (worker.stats.succeeded, worker.stats.dead) == (1, 2)
    dead = conn.execute_sql(
        "SELECT job_name, exception_class, exception_message, attempts FROM outbox_failed_jobs "
        "ORDER BY job_name"
    )
    assert [(str(j), str(c), int(a)) for j, c, _, a in dead] == [
        ("ret.async", "outbox.errors.ConfigurationError", 1),
        ("ret.sync", "outbox.errors.ConfigurationError", 1),
    ]
    assert all("returned a coroutine" in str(m) for _, _, m, _ in dead)


def _gen(payload: Any, ctx: JobContext) -> Any:
    yield 1


async def _agen(payload: Any, ctx: JobContext) -> Any:
    yield 1


class GenCallable:
    def __call__(self, payload: Any, ctx: JobContext) -> Any:
        yield 1


@pytest.mark.parametrize("fn", [_gen, _agen, GenCallable()], ids=["gen", "async gen", "object"])
def test_a_generator_handler_is_refused_at_registration(fn: Any) -> None:
    from outbox.errors import ConfigurationError

    registry = Registry()
    with pytest.raises(ConfigurationError, match=r"job 'g\.x': the handler is a generator"):
        registry.job("g.x")(fn)
    assert registry.get("g.x") is None


def _payload_only(payload: Any) -> None:
    pass


def _one_too_many(payload: Any, ctx: JobContext, extra: Any) -> None:
    pass


def _ctx_by_keyword(payload: Any, *, ctx: JobContext) -> None:
    pass


async def _async_payload_only(payload: Any) -> None:
    pass


@pytest.mark.parametrize(
    "fn", [_payload_only, _one_too_many, _ctx_by_keyword, _async_payload_only],
    ids=["payload only", "a third argument", "ctx keyword-only", "async payload only"],
)
def test_a_handler_that_cannot_take_payload_and_ctx_is_refused_at_registration(fn: Any) -> None:
    """Refused where it is given, not dead-lettering every job it would be called for."""
    from outbox.errors import ConfigurationError

    registry = Registry()
    with pytest.raises(ConfigurationError, match=r"job 's\.x': the worker calls the handler as"):
        registry.job("s.x")(fn)
    assert registry.get("s.x") is None


def test_handlers_that_can_take_payload_and_ctx_are_registered() -> None:
    import functools

    def with_defaults(payload: Any, ctx: Any = None, extra: int = 1) -> None:
        pass

    def leading(first: int, payload: Any, ctx: Any) -> None:
        pass

    registry = Registry()
    for i, fn in enumerate(
        [with_defaults, lambda *args: None, functools.partial(leading, 1), AsyncCallable(), print]
    ):
        registry.job(f"ok.{i}")(fn)
        assert registry.get(f"ok.{i}") is not None
