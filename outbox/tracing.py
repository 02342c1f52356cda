"""OpenTelemetry tracing: the only module that imports ``opentelemetry``.

A job's work shows up in the trace of the request that recorded it. ``record()``,
``push()``, ``emit()`` and the scheduler ``capture()`` the caller's current span context
as W3C Trace Context and store it with the intent (``trace_context``); the relay copies it
into the queue row, or into the ``traceparent``/``tracestate`` headers of the JetStream
message. Each attempt then runs in a CONSUMER span whose parent is that context
(``attempt``), and each relay batch gets a span linked to every intent it moved
(``relay_batch``). Names and attributes follow OpenTelemetry's messaging semantic
conventions.

Why the producer makes no span of its own: the span the application is in when it
calls ``record()`` *is* the producer (its request, its business transaction), and one
more span per recorded job would cost on the hot path what the attempt span already
says (the message id, the queue). The scheduler is its own request, so it opens a short
PRODUCER span per tick and records inside it.

The stored form is one nullable text column, ``<traceparent>`` or ``<traceparent>
<tracestate>`` (one space between; a traceparent has none): at most ``MAX_STORED``
characters. A tracestate over the W3C limit of 512 characters is dropped, never
truncated (a cut list member would be corrupt); the traceparent alone still joins the
trace. No valid current span context stores NULL.

Only the API is used at run time; the application installs and configures the SDK (or
any other implementation). Without ``opentelemetry-api`` every function here is a no-op
behind one module-level check. With the API but no tracer provider set, capturing still
propagates a context an instrumented framework put in place (that is what the API is
for, and it is a dictionary lookup), while spans are only made once a provider is set.

Spans never carry payloads, exception messages, tracebacks or database URLs: a failed
attempt sets status ERROR with the exception's class name as its description and the
``error.type`` attribute; ``record_exception`` is never called (it stores the message
and traceback).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from outbox.record import capture_traces_with

try:  # the `tracing` extra: opentelemetry-api
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by the bench and the no-extra test
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]

MAX_TRACESTATE = 512  # W3C Trace Context: at most 32 members, 512 characters
MAX_STORED = 55 + 1 + MAX_TRACESTATE  # a version-00 traceparent is 55 characters
MAX_LINKS = 128  # the SDK's default link limit: a batch of 500 links to its first 128

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SQL_SYSTEM = "outbox"  # messaging.system of the SQL queue
NATS_SYSTEM = "nats"  # messaging.system on JetStream

_SCOPE = "outbox"
_W3C: Any = TraceContextTextMapPropagator() if _trace is not None else None
# The API keeps the provider in a module global; read it directly unless the environment
# names a provider for the API to load on first use.
_GLOBAL_READABLE = (
    _trace is not None
    and hasattr(_trace, "_TRACER_PROVIDER")
    and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
)
_INERT: tuple[type, ...] = (
    (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider) if _trace is not None else ()
)


def available() -> bool:
    """``opentelemetry-api`` is installed."""
    return _trace is not None


def enabled() -> bool:
    """A tracer provider is set, so spans are worth making.

    Asked once per attempt, so the answer while none is set is one read of the API's
    global (``get_tracer_provider`` also looks the environment up on every call, which
    the worker's hot path would feel). The API loads a provider named in the environment
    lazily: then the public call decides.
    """
    if _trace is None:
        return False
    if _GLOBAL_READABLE and _trace._TRACER_PROVIDER is None:
        return False
    return not isinstance(_trace.get_tracer_provider(), _INERT)


def capture() -> str | None:
    """The caller's current span context in the stored form, or None when there is none
    (or the API is not installed)."""
    if _trace is None:
        return None
    if not _trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return encode(carrier.get(TRACEPARENT), carrier.get(TRACESTATE))


def encode(traceparent: str | None, tracestate: str | None = None) -> str | None:
    """The stored form of W3C headers: None without a well-formed traceparent; a
    tracestate over 512 characters is left out."""
    if not traceparent or len(traceparent) != 55 or " " in traceparent:
        return None
    if tracestate and len(tracestate) <= MAX_TRACESTATE and tracestate.isprintable():
        return f"{traceparent} {tracestate}"
    return traceparent


def headers(stored: str | None) -> dict[str, str]:
    """The W3C headers of a stored context (empty for None): the JetStream message
    carries them."""
    if not stored:
        return {}
    parent, _, state = stored.partition(" ")
    return {TRACEPARENT: parent, TRACESTATE: state} if state else {TRACEPARENT: parent}


def from_headers(carrier: dict[str, str] | None) -> str | None:
    """The stored form of the W3C headers a message carries (None without them)."""
    if not carrier or TRACEPARENT not in carrier:
        return None
    return encode(carrier[TRACEPARENT], carrier.get(TRACESTATE))


def _extract(stored: str | None) -> Any:
    """The context a stored form names: its span as a remote parent (an empty context
    when malformed: a bad row never fails a job)."""
    return _W3C.extract(headers(stored))


def _link(stored: str) -> Any:
    span_context = _trace.get_current_span(_extract(stored)).get_span_context()
    return _trace.Link(span_context) if span_context.is_valid else None


def _tracer() -> Any:
    return _trace.get_tracer(_SCOPE, _version())


@cache
def _version() -> str | None:
    """The instrumentation scope's version: the installed distribution's."""
    from importlib import metadata  # ~10 ms to import: only once a span is made

    try:
        return metadata.version("outbox-relay")
    except metadata.PackageNotFoundError:
        return None


class Attempt:
    """What ``attempt`` yields: the one call the runner makes when the attempt ends."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def failed(self, exception_class: str | None) -> None:
        """The attempt did not succeed: status ERROR with the class name only."""
        if self._span is None or not exception_class:
            return
        self._span.set_attribute("error.type", exception_class)
        self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, exception_class))

    def outcome(self, outcome: str) -> None:
        """How the attempt ended (``done``, ``failed``, ``snoozed``...), an attribute."""
        if self._span is not None:
            self._span.set_attribute("messaging.outbox.outcome", outcome)


_NO_ATTEMPT = Attempt(None)


@contextmanager
def attempt(
    system: str,
    queue: str,
    message_id: str,
    attempt_number: int,
    job_name: str,
    stored: str | None,
) -> Iterator[Attempt]:
    """Run one attempt inside a CONSUMER span ``<queue> process`` whose parent is the
    recorded context (a new trace when none was recorded); a no-op without a provider.

    The span is current while the handler runs, so the handler's own spans (an HTTP
    call, a query) are its children. An exception escaping the block (not the handler's:
    the runner turns those into outcomes) marks the span with its class name only.
    """
    if not enabled():
        yield _NO_ATTEMPT
        return
    span = _tracer().start_span(
        f"{queue} process",
        context=_extract(stored) if stored else _context.Context(),
        kind=_trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": system,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": message_id,
            "messaging.outbox.attempt": attempt_number,
            "messaging.outbox.job_name": job_name,
        },
        record_exception=False,
        set_status_on_exception=False,
    )
    token = _context.attach(_trace.set_span_in_context(span))
    recorder = Attempt(span)
    try:
        yield recorder
    except BaseException as exc:
        recorder.failed(type(exc).__qualname__)
        raise
    finally:
        _context.detach(token)
        span.end()


def relay_batch(
    system: str, started_ns: int, handed_off: int, stored: Sequence[str | None]
) -> None:
    """One PRODUCER span ``send`` for a relay batch that handed something off, linked to
    the recorded context of each intent it moved (at most ``MAX_LINKS``). Made after the
    batch committed, with the batch's start time, so nothing is held open across the
    transaction; a no-op without a provider."""
    if not handed_off or not enabled():
        return
    links = [link for s in _first(stored) if (link := _link(s)) is not None]
    span = _tracer().start_span(
        "send",
        context=_context.Context(),  # a batch belongs to no single request: links say whose
        kind=_trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": system,
            "messaging.operation.type": "send",
            "messaging.operation.name": "relay",
            "messaging.batch.message_count": handed_off,
        },
        links=links,
        start_time=started_ns,
        record_exception=False,
        set_status_on_exception=False,
    )
    span.end()


def _first(stored: Iterable[str | None]) -> Iterator[str]:
    n = 0
    for s in stored:
        if s:
            yield s
            n += 1
            if n >= MAX_LINKS:
                return


def now_ns() -> int:
    """The wall clock in nanoseconds, as span start times take it."""
    return time.time_ns()


@contextmanager
def scheduled(schedule: str, queue: str) -> Iterator[None]:
    """A short PRODUCER span ``<queue> create`` around the scheduler's record of one
    tick, so a periodic job's attempts have a parent; a no-op without a provider."""
    if not enabled():
        yield
        return
    with _tracer().start_as_current_span(
        f"{queue} create",
        kind=_trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": SQL_SYSTEM,
            "messaging.operation.type": "create",
            "messaging.destination.name": queue,
            "messaging.outbox.schedule": schedule,
        },
        record_exception=False,
        set_status_on_exception=False,
    ):
        yield


# record() sits a layer below this module: it reads the capture through this hook.
capture_traces_with(capture)
