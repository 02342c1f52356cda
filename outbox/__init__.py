"""outbox: a transactional outbox, relay and SQL job queue.

Record a job intent in your own database transaction with ``record()``; a relay moves
committed intents into the queue; workers run them at least once. To run a relay or a
worker in-process: ``Database(url)``, ``Relay(database).run()``,
``Worker(database, registry, WorkerConfig(...)).run()`` (or ``run_once()`` to step it).
Steer queues while they run: ``pause_queue``/``resume_queue``, ``cancel_job``, and
``Snooze`` raised by a handler (``outbox.queue.control``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Both plug a hook into a module below them as they load, and the hooks' modules say
# that `import outbox` loads them: record() stores the caller's span context through
# outbox.tracing's; outbox.job converts typed jobs and payloads through outbox.job.typed's.
from outbox import tracing  # noqa: F401
from outbox.job.typed import job_type, typed_job

# ``record`` is also a submodule's name: imported now, so that ``outbox.record`` is the
# function whichever module imports ``outbox.record`` later (the import system binds a
# submodule on its package as it loads it, over a name set by ``__getattr__``).
from outbox.record import record, record_async, record_many, record_many_async

if TYPE_CHECKING:  # what the names below are; at run time each is imported on first use
    from outbox.db.connection import Database
    from outbox.errors import PermanentFailure, Snooze
    from outbox.events import Event, emit, emit_async
    from outbox.job import Job
    from outbox.job import sealing as sealing
    from outbox.queue import Backoff, JobContext, Registry, Worker, WorkerConfig, WorkerStats
    from outbox.queue.context import DBAPIConnection
    from outbox.queue.control import cancel as cancel_job
    from outbox.queue.control import pause as pause_queue
    from outbox.queue.control import paused as paused_queues
    from outbox.queue.control import resume as resume_queue
    from outbox.queue.push import push, push_async, push_many, push_many_async
    from outbox.relay import Relay, RelayConfig
    from outbox.workflows import Workflow

# The rest, each imported on first use (PEP 562): name -> "module" (the same name there)
# or "module:attribute". A process that needs a little of outbox (every `outbox`
# command, a job handler's module) no longer imports the worker, the relay and the
# workflows, ~0.05 s of CPU per fresh interpreter.
_LAZY = {
    "Database": "outbox.db.connection",
    "PermanentFailure": "outbox.errors",
    "Snooze": "outbox.errors",
    "Event": "outbox.events",
    "emit": "outbox.events",
    "emit_async": "outbox.events",
    "Job": "outbox.job",
    "sealing": "outbox.job",  # `from outbox import sealing`, as the docs write
    "Backoff": "outbox.queue",  # it imports the worker's names on first use too
    "DBAPIConnection": "outbox.queue.context",
    "JobContext": "outbox.queue",
    "cancel_job": "outbox.queue.control:cancel",
    "pause_queue": "outbox.queue.control:pause",
    "paused_queues": "outbox.queue.control:paused",
    "resume_queue": "outbox.queue.control:resume",
    "push": "outbox.queue",
    "push_async": "outbox.queue",
    "push_many": "outbox.queue",
    "push_many_async": "outbox.queue",
    "Registry": "outbox.queue",
    "Worker": "outbox.queue",
    "WorkerConfig": "outbox.queue",
    "WorkerStats": "outbox.queue",
    "Relay": "outbox.relay",
    "RelayConfig": "outbox.relay",
    "Workflow": "outbox.workflows",
}


def __getattr__(name: str) -> Any:
    """``outbox.Job``, ``from outbox import Job``: the name's module is imported now."""
    try:
        module, _, attribute = _LAZY[name].partition(":")
    except KeyError:
        raise AttributeError(f"module 'outbox' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "DBAPIConnection",
    "Database",
    "Event",
    "Job",
    "JobContext",
    "PermanentFailure",
    "Registry",
    "Relay",
    "RelayConfig",
    "Snooze",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "Workflow",
    "__version__",
    "cancel_job",
    "emit",
    "emit_async",
    "job_type",
    "pause_queue",
    "paused_queues",
    "push",
    "push_async",
    "push_many",
    "push_many_async",
    "record",
    "record_async",
    "record_many",
    "record_many_async",
    "resume_queue",
    "typed_job",
]
