"""``run_tasks``: run the tasks a Django test enqueued, inside the test's transaction.

A ``django.test.TestCase`` wraps each test in a transaction that is rolled back at its
end, so no worker process could ever see what the test enqueued. ``run_tasks()`` runs
those tasks right there, on the test's own connection (``outbox.testing.run_pending``
with the worker's registry: every ``django.tasks`` task and ``OUTBOX['REGISTRY']``),
with the worker's retries and failure handling, and returns the ``Report`` of what ran.
It is the counterpart of Django's ``captureOnCommitCallbacks(execute=True)`` for work
that must survive a crash: ``on_commit`` callbacks never run inside a ``TestCase``,
outbox's jobs are rows, and they run here.
"""

from __future__ import annotations

from outbox.contrib.django import conf
from outbox.testing.clock import Clock
from outbox.testing.run import Report, run_pending


def run_tasks(using: str | None = None, *, clock: Clock | None = None) -> Report:
    """Run every due task and job on Django's connection ``using`` (default: the
    ``OUTBOX['DATABASE']`` alias), in its open transaction; repeat while tasks enqueue
    more. Pass an ``outbox.testing.Clock`` to run delayed ones (``run_after``) by
    advancing it."""
    from django.db import connections

    from outbox.contrib.django.worker import build

    return run_pending(connections[using or conf.alias()], build(), clock=clock)
