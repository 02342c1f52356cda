"""``outbox.testing``: run an application's jobs inside its own test suite.

No mock queue: the application records with the real ``record()``/``push()``/``emit()``
into the real tables, and ``run_pending(conn)`` relays and runs everything due on the
test's own connection, inside its transaction, so rollback-per-test fixtures undo it
all. ``Clock`` is a frozen clock the test advances (delays, retries, periodic ticks);
``recorded``/``assert_recorded`` read what was stored; ``eager`` runs jobs at commit.

The pytest plugin (``outbox.testing.plugin``, loaded automatically once outbox is
installed) adds the ``outbox``, ``outbox_clock``, ``outbox_registry`` and
``outbox_eager`` fixtures and the ``outbox_registry`` ini setting.
"""

from outbox.testing.assertions import ANY, RecordedJob, assert_recorded, recorded
from outbox.testing.clock import Clock
from outbox.testing.eager import eager, eager_from_env
from outbox.testing.run import Ran, Report, run_pending, use

__all__ = [
    "ANY",
    "Clock",
    "Ran",
    "RecordedJob",
    "Report",
    "assert_recorded",
    "eager",
    "eager_from_env",
    "recorded",
    "run_pending",
    "use",
]
