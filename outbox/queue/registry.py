"""Job handlers by name: ``Registry`` and the ``@registry.job(...)`` decorator.

A handler is a sync or async function ``(payload, ctx)``. Its settings travel with it:
``max_attempts`` (used when the job was recorded without one; default 3), ``backoff``
(an ``outbox.Backoff``; default 5 s base, 300 s cap), ``timeout`` (seconds) and
``transactional``, ``keep_result`` (``outbox.results``), and the global limits
``concurrency``, ``concurrency_key`` and ``rate`` (``outbox.queue.limits``).
``outbox.queue.options`` checks each one when the handler registers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from outbox.errors import ConfigurationError
from outbox.queue.backoff import DEFAULT_BACKOFF, Backoff
from outbox.queue.limits import Limits
from outbox.queue.options import check_handler, check_job_options, check_limits, is_async_handler
from outbox.results import keep_ms as result_keep_ms

DEFAULT_MAX_ATTEMPTS = 3
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Handler:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    max_attempts: int
    backoff: Backoff
    timeout: float | None
    transactional: bool
    limits: Limits | None = None
    keep_result_ms: int | None = None  # None: the outcome is not kept (outbox.results)
    # A dead letter of this name keeps its ordering key blocked (outbox.db.ordering).
    dead_letter_holds_key: bool = False


class Registry:
    """Maps job names to handlers. Workers are started with one (``--app MODULE:ATTR``)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def job(
        self,
        name: str,
        *,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        transactional: bool = False,
        concurrency: int | None = None,
        concurrency_key: Callable[[Any], str | int] | None = None,
        rate: str | None = None,
        keep_result: bool | float = False,
        dead_letter_holds_key: bool = False,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of job ``name``.

        ``concurrency=N``: at most N jobs of this name run at once across every worker;
        ``rate="100/m"`` (or N/s, N/h): at most N start in any sliding window. With
        ``concurrency_key`` (payload → str or int) both hold per key value instead.

        ``transactional=True``: the handler runs inside a transaction on the worker's
        database whose commit also deletes the job (exactly-once effects there); it must
        be a sync function and gets the connection as ``ctx.connection``.

        ``keep_result=True`` (or the seconds to keep it; True is 7 days): the outcome is
        written with the acknowledgement, in its transaction, and read back with
        ``outbox.results.get`` or ``outbox result ID`` (see ``outbox.results``).

        ``dead_letter_holds_key=True``: a job of this name with an ordering key that is
        dead-lettered keeps its key blocked (the key's later jobs wait) until an operator
        requeues it (``outbox queue retry``) or forgets it (``outbox queue forget``);
        by default a dead letter releases its key at once.
        """
        if not isinstance(dead_letter_holds_key, bool):
            raise ConfigurationError(f"job {name!r}: dead_letter_holds_key must be True or False")
        check_job_options(
            name,
            max_attempts=max_attempts,
            backoff=backoff,
            timeout=timeout,
            transactional=transactional,
        )
        limits = check_limits(
            name, concurrency=concurrency, concurrency_key=concurrency_key, rate=rate
        )
        keep_ms = result_keep_ms(name, keep_result)

        def register(fn: F) -> F:
            check_handler(name, fn)
            is_async = is_async_handler(fn)
            if transactional and is_async:
                raise ConfigurationError(
                    f"job {name!r}: transactional handlers must be sync functions "
                    "(they run on a database connection of the worker's thread)"
                )
            if name in self._handlers:
                raise ConfigurationError(f"job {name!r} is already registered")
            self._handlers[name] = Handler(
                name=name,
                fn=fn,
                is_async=is_async,
                max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS,
                backoff=backoff or DEFAULT_BACKOFF,
                timeout=timeout,
                transactional=transactional,
                limits=limits,
                keep_result_ms=keep_ms,
                dead_letter_holds_key=dead_letter_holds_key,
            )
            return fn

        return register

    def get(self, name: str) -> Handler | None:
        """The handler registered under ``name``, or ``None`` when this registry has none."""
        return self._handlers.get(name)

    def include(self, other: Registry) -> None:
        """Run ``other``'s handlers here too, with its periodic jobs and listeners (a
        framework's tasks beside an application's registry, as
        ``outbox.contrib.django`` does). ``other`` is left as it is; a job name both
        define raises ``ConfigurationError``, and so does a second registry with
        schedules or listeners (the books are shared, not merged)."""
        both = sorted(set(self._handlers) & set(other._handlers))
        if both:
            raise ConfigurationError(f"jobs {both} are registered in both registries")
        for book in ("_schedules", "_listeners"):
            theirs = other.__dict__.get(book)
            if theirs is not None and len(theirs.events() if book == "_listeners" else theirs):
                if book in self.__dict__:
                    raise ConfigurationError("only one included registry may bring " + book[1:])
                self.__dict__[book] = theirs
        self._handlers.update(other._handlers)

    def max_attempts(self, name: str, recorded: int | None) -> int:
        """The attempt limit of one job: as recorded with it, else the handler's."""
        if recorded is not None:
            return recorded
        handler = self._handlers.get(name)
        return handler.max_attempts if handler else DEFAULT_MAX_ATTEMPTS

    @property
    def limited(self) -> dict[str, Limits]:
        """The job names with global limits, and theirs."""
        return {n: h.limits for n, h in self._handlers.items() if h.limits is not None}

    @property
    def has_async(self) -> bool:
        """Whether any handler is a coroutine function (an async handler)."""
        return any(h.is_async for h in self._handlers.values())

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    # Periodic jobs and event listeners: the declarations live in outbox.schedule and
    # outbox.events; the registry only keeps them next to the handlers they need.

    def periodic(
        self,
        cron: str,
        *,
        name: str,
        queue: str = "default",
        payload: Any = None,
        timezone: str = "UTC",
        max_attempts: int | None = None,
        **job_settings: Any,
    ) -> Callable[[F], F]:
        """Register the decorated function as job ``name`` and record it at every tick
        of ``cron`` (in ``timezone``) with ``payload`` on ``queue``.

        An invalid cron expression or timezone, or a name already declared, raises
        ``ConfigurationError`` here. ``job_settings`` go to ``job()`` (``backoff``, ...).
        """
        entry = self._declare(cron, name, None, queue, payload, timezone, max_attempts)
        register = self.job(name, max_attempts=max_attempts, **job_settings)

        def decorate(fn: F) -> F:
            registered = register(fn)
            self.schedules.add(entry)
            return registered

        return decorate

    def schedule(
        self,
        cron: str,
        *,
        name: str,
        job: str | None = None,
        queue: str = "default",
        payload: Any = None,
        timezone: str = "UTC",
        max_attempts: int | None = None,
    ) -> None:
        """Record ``Job(job or name, payload, queue)`` at every tick of ``cron``; the job's
        handler may live elsewhere (another service's worker)."""
        self.schedules.add(self._declare(cron, name, job, queue, payload, timezone, max_attempts))

    def listen(
        self,
        event: str,
        handler: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str = "default",
        **job_settings: Any,
    ) -> str:
        """Run ``handler`` as its own job for every ``emit`` of ``event``; return the job name.

        The job is named ``name``, by default ``<event>.<function name>``; each listener
        is a job of its own, so one that fails never holds up the others.
        """
        from outbox.events import listener_name

        job_name = listener_name(event, handler, name)
        self.job(job_name, **job_settings)(handler)
        self.listeners.add(event, job_name, queue)
        return job_name

    @property
    def schedules(self) -> Any:
        """The periodic jobs declared on this registry (``outbox.schedule.Schedules``)."""
        from outbox.schedule import Schedules

        book: Schedules = self.__dict__.setdefault("_schedules", Schedules())
        return book

    @property
    def listeners(self) -> Any:
        """The event listeners declared on this registry (``outbox.events.Listeners``)."""
        from outbox.events import Listeners

        book: Listeners = self.__dict__.setdefault("_listeners", Listeners())
        return book

    def _declare(
        self,
        cron: str,
        name: str,
        job: str | None,
        queue: str,
        payload: Any,
        timezone: str,
        max_attempts: int | None,
    ) -> Any:
        from outbox.schedule import declare

        if self.schedules.get(name) is not None:
            raise ConfigurationError(f"schedule {name!r} is already declared")
        return declare(
            cron,
            name=name,
            job=job,
            queue=queue,
            payload=payload,
            timezone=timezone,
            max_attempts=max_attempts,
        )

