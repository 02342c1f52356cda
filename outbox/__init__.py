"""outbox: a transactional outbox, relay and SQL job queue.

Record a job intent in your own database transaction with ``record()``; a relay moves
committed intents into the queue; workers run them at least once. To run a relay or a
worker in-process: ``Database(url)``, ``Relay(database).run()``,
``Worker(database, registry, WorkerConfig(...)).run()`` (or ``run_once()`` to step it).
Steer queues while they run: ``pause_queue``/``resume_queue``, ``cancel_job``, and
``Snooze`` raised by a handler (``outbox.queue.control``).
"""

from outbox.db.connection import Database
from outbox.errors import PermanentFailure, Snooze
from outbox.events import Event, emit, emit_async
from outbox.job import Job
from outbox.job import sealing as sealing  # `from outbox import sealing`, as the docs write
from outbox.job.typed import job_type, typed_job
from outbox.queue.backoff import Backoff
from outbox.queue.context import DBAPIConnection, JobContext
from outbox.queue.control import cancel as cancel_job
from outbox.queue.control import pause as pause_queue
from outbox.queue.control import paused as paused_queues
from outbox.queue.control import resume as resume_queue
from outbox.queue.push import push, push_async, push_many, push_many_async
from outbox.queue.registry import Registry
from outbox.queue.worker import Worker, WorkerConfig, WorkerStats
from outbox.record import record, record_async, record_many, record_many_async
from outbox.relay import Relay, RelayConfig
from outbox.workflows import Workflow

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
