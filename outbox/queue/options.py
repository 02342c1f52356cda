"""The checks on ``@registry.job(...)``'s options, made when the handler registers.

A wrong option found only when a job first fails would kill the worker mid-batch and
strand its claimed jobs until their leases expire, each losing an attempt. So every
option is checked here, at import time of the application's jobs module, and a wrong
one raises ``ConfigurationError`` naming the job, the option, what it takes and the
value given (``outbox.job.shown``: never a long string).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

from outbox.errors import ConfigurationError
from outbox.job import MAX_ATTEMPTS_LIMIT, NAME_PATTERN, shown
from outbox.queue.backoff import Backoff
from outbox.queue.limits import Limits, parse_rate


def check_job_options(
    name: object,
    *,
    max_attempts: object,
    backoff: object,
    timeout: object,
    transactional: object,
) -> None:
    """Raise ``ConfigurationError`` naming the first option of ``name`` that is wrong."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(f"job name {name!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
    if max_attempts is not None and not (
        _is_int(max_attempts) and 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT  # type: ignore[operator]
    ):
        raise _wrong(name, "max_attempts", f"an int from 1 to {MAX_ATTEMPTS_LIMIT}", max_attempts)
    if backoff is not None:
        _check_backoff(name, backoff)
    if timeout is not None and not (
        _is_number(timeout) and timeout > 0 and math.isfinite(timeout)  # type: ignore[operator, arg-type]
    ):
        raise _wrong(name, "timeout", "a positive, finite number of seconds", timeout)
    if not isinstance(transactional, bool):
        raise _wrong(name, "transactional", "True or False", transactional)


def check_limits(
    name: str, *, concurrency: object, concurrency_key: object, rate: object
) -> Limits | None:
    """The global limits of ``name`` (``outbox.queue.limits``), or None without any."""
    if concurrency is not None and not (_is_int(concurrency) and concurrency >= 1):  # type: ignore[operator]
        raise _wrong(name, "concurrency", "a whole number >= 1 (jobs at once)", concurrency)
    if concurrency_key is not None and not callable(concurrency_key):
        raise _wrong(name, "concurrency_key", "a function of the payload", concurrency_key)
    parsed = parse_rate(name, rate) if rate is not None else None
    if concurrency_key is not None and concurrency is None and parsed is None:
        raise ConfigurationError(
            f"job {name!r}: concurrency_key needs concurrency=N or rate=... to key"
        )
    if concurrency is None and parsed is None:
        return None
    return Limits(concurrency, parsed, concurrency_key)  # type: ignore[arg-type]


def check_handler(name: str, fn: object) -> Callable[..., Any]:
    """The decorated object must be a function (or other callable) taking (payload, ctx),
    checked here rather than at every job it would fail; and not a generator function:
    calling one runs none of its body, so the worker would count a job done that never
    ran."""
    if not callable(fn):
        raise ConfigurationError(
            f"job {name!r}: @registry.job(...) decorates a function taking (payload, ctx), "
            f"not a {type(fn).__name__}"
        )
    target = _called(fn)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise ConfigurationError(
            f"job {name!r}: the handler is a generator function (it yields), so calling it "
            "would run none of its body; return or raise instead"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a callable with no signature to read (some builtins)
        return fn
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise ConfigurationError(
            f"job {name!r}: the worker calls the handler as fn(payload, ctx), which its "
            f"signature {signature} cannot take ({exc})"
        ) from None
    return fn


def is_async_handler(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine to await: an ``async def``, a partial of
    one, a bound ``async def`` method, or an object whose ``__call__`` is ``async def``
    (``inspect.iscoroutinefunction`` alone misses the last, and such a handler would be
    called, never awaited, and counted done)."""
    return inspect.iscoroutinefunction(_called(fn))


def _called(fn: object) -> object:
    """What calling ``fn`` runs: through partials, to an object's ``__call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or isinstance(fn, type):
        return fn
    return type(fn).__call__ if callable(fn) else fn


def _check_backoff(name: str, backoff: object) -> None:
    if not isinstance(backoff, Backoff):
        raise _wrong(
            name,
            "backoff",
            "an outbox.Backoff, e.g. Backoff(base=0.5, cap=60) (seconds)",
            backoff,
        )
    for part in ("base", "cap"):
        value = getattr(backoff, part)
        if not (_is_number(value) and math.isfinite(value)):
            raise ConfigurationError(
                f"job {name!r}: backoff.{part} must be a finite number of seconds "
                f"(got {shown(value)})"
            )
    if not isinstance(backoff.jitter, bool):
        raise ConfigurationError(
            f"job {name!r}: backoff.jitter must be True or False (got {shown(backoff.jitter)})"
        )


def _wrong(name: str, option: str, wanted: str, got: object) -> ConfigurationError:
    return ConfigurationError(f"job {name!r}: {option} must be {wanted} (got {shown(got)})")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
