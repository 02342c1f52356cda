"""outbox: a transactional outbox, relay and SQL job queue.

Record a job intent in your own database transaction with ``record()``; a relay moves
committed intents into the queue; workers run them at least once.
"""

from outbox.errors import PermanentFailure
from outbox.events import Event, emit, emit_async
from outbox.job import Job
from outbox.queue.registry import Registry
from outbox.record import record, record_async, record_many, record_many_async

__version__ = "0.1.0"

__all__ = [
    "Event",
    "Job",
    "PermanentFailure",
    "Registry",
    "__version__",
    "emit",
    "emit_async",
    "record",
    "record_async",
    "record_many",
    "record_many_async",
]
