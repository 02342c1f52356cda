"""Event fan-out: ``emit`` records one job intent per listener of an event.

``registry.listen("user.registered", handler)`` makes ``handler`` a job of its own
(named ``user.registered.<function>`` unless given a name). ``emit(conn, key, event)``
runs in the caller's transaction, like ``record()``, and records one intent per
listener with ``record_many``, so the event and the business write commit or roll back
together, and each listener runs (and fails, and retries) on its own.

Keys. Each listener's intent gets a key derived from the caller's key, the event name
and the listener's job name (``event:<sha256>``), so:

- replaying an ``emit`` with the same key returns the same intents (per listener);
- an event already emitted under ``key`` is *not* delivered to a listener added
  since: a replay records only for the listeners whose intents the first ``emit``
  recorded (found by their keys; until ``outbox prune`` removes those keys);
- an event nobody listens to is recorded nowhere, and logged once per emit.

Which listeners: those of the ``registry`` passed, else every registry of this
process that declared a listener for the event (see ``Listeners``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from outbox.db.adapters import adapt, adapt_async
from outbox.db.caller import keys_held, run, run_async
from outbox.errors import ConfigurationError, InvalidJob
from outbox.job import NAME_PATTERN, Job, canonical_json, key_digest
from outbox.log import get_logger
from outbox.record import record_many, record_many_async

log = get_logger("outbox.events")


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened: a ``name`` (like a job name) and a JSON ``payload``."""

    name: str
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Listener:
    event: str
    job_name: str
    queue: str


class Listeners:
    """The listeners of one registry, by event; each also joins the process-wide set
    that ``emit`` uses when no registry is given."""

    def __init__(self) -> None:
        self._by_event: dict[str, list[Listener]] = {}

    def add(self, event: str, job_name: str, queue: str) -> None:
        listener = Listener(event, job_name, queue)
        self._by_event.setdefault(event, []).append(listener)
        _PROCESS.add(listener)

    def of(self, event: str) -> list[Listener]:
        return list(self._by_event.get(event, ()))

    def events(self) -> list[str]:
        return sorted(self._by_event)


class _ProcessListeners:
    """Every listener declared in this process, once per (event, job name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_event: dict[str, dict[str, Listener]] = {}

    def add(self, listener: Listener) -> None:
        with self._lock:
            self._by_event.setdefault(listener.event, {})[listener.job_name] = listener

    def of(self, event: str) -> list[Listener]:
        with self._lock:
            return list(self._by_event.get(event, {}).values())


_PROCESS = _ProcessListeners()


def listener_name(event: str, handler: Callable[..., Any], name: str | None) -> str:
    """The job name of a listener, checked at declaration."""
    if not isinstance(event, str) or not NAME_PATTERN.fullmatch(event):
        raise ConfigurationError(f"event name {event!r} must be 1-200 chars of [A-Za-z0-9_.:-]")
    if not callable(handler):
        raise ConfigurationError(f"listener of {event!r}: the handler must be callable")
    job_name = name if name is not None else f"{event}.{getattr(handler, '__name__', '')}"
    if not NAME_PATTERN.fullmatch(job_name):
        raise ConfigurationError(
            f"listener of {event!r}: job name {job_name!r} must be 1-200 chars of "
            "[A-Za-z0-9_.:-]; pass name="
        )
    return job_name


def listener_key(key: str, event: str, job_name: str) -> str:
    """The key of one listener's intent: printable, 70 bytes, whatever the inputs."""
    digest = hashlib.sha256(f"{event}\n{job_name}\n{key}".encode("ascii")).hexdigest()
    return f"event:{digest}"


def emit(conn: Any, key: str, event: Event, *, registry: HasListeners | None = None) -> list[str]:
    """Record one intent per listener of ``event`` in ``conn``'s transaction.

    Returns the message ids, one per listener, in declaration order (``[]`` when nobody
    listens). Errors as ``record_many``: ``InvalidKey``/``InvalidJob`` for bad input
    (nothing written), ``NoActiveTransaction``, ``IdempotencyConflict`` when ``key``
    was emitted before with another payload, ``RetryTransaction``.
    """
    plan = _plan(key, event, registry)
    if not plan:
        return []
    target = adapt(conn)
    held = set(run(keys_held(_digests(plan)), target, "emit"))
    return record_many(conn, _items(plan, held, event))


async def emit_async(
    conn: Any, key: str, event: Event, *, registry: HasListeners | None = None
) -> list[str]:
    """``emit`` for SQLAlchemy AsyncConnection/AsyncSession and psycopg AsyncConnection."""
    plan = _plan(key, event, registry)
    if not plan:
        return []
    target = await adapt_async(conn)
    held = set(await run_async(keys_held(_digests(plan)), target, "emit"))
    return await record_many_async(conn, _items(plan, held, event))


class HasListeners(Protocol):
    """What ``emit`` needs of a registry (an ``outbox.Registry``): its listeners. A
    protocol, so that this module and ``outbox.queue.registry``, which keeps a
    ``Listeners`` book, do not import each other."""

    @property
    def listeners(self) -> Any: ...


# listener -> the key its intent gets
_Plan = list[tuple[Listener, str]]


def _plan(key: str, event: Event, registry: HasListeners | None) -> _Plan:
    """Validate everything before any I/O; the listeners with their derived keys."""
    if not isinstance(event, Event):
        raise InvalidJob(f"expected an outbox.Event (got {type(event).__name__})")
    if not isinstance(event.name, str) or not NAME_PATTERN.fullmatch(event.name):
        raise InvalidJob("event name must be 1-200 characters of A-Z a-z 0-9 _ . : -")
    key_digest(key)
    canonical_json(event.payload)
    listeners = registry.listeners.of(event.name) if registry is not None else None
    if listeners is None:
        listeners = _PROCESS.of(event.name)
    if not listeners:
        log.warning(
            "event.no_listeners",
            name=event.name,
            hint="nothing recorded: no listener of this event is declared in this process "
            "(import the module that declares them, or pass registry=)",
        )
        return []
    return [(li, listener_key(key, event.name, li.job_name)) for li in listeners]


def _digests(plan: _Plan) -> list[str]:
    """The listeners' key digests: those already recorded mean the event was emitted
    before."""
    return [key_digest_unchecked(k) for _, k in plan]


def _items(plan: _Plan, held: set[str], event: Event) -> list[tuple[str, Job]]:
    """All listeners for a new event; only those recorded before for a replay."""
    chosen: Iterable[tuple[Listener, str]] = plan
    if held:
        chosen = [(li, k) for li, k in plan if key_digest_unchecked(k) in held]
    return [(k, Job(li.job_name, event.payload, queue=li.queue)) for li, k in chosen]


def key_digest_unchecked(key: str) -> str:
    """The stored digest of a key we derived ourselves (already valid by construction)."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()
