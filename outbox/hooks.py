"""What the services report as they work: the ``Hooks`` they are given.

``Worker``, ``Relay``, ``Scheduler`` and ``JetStreamWorker`` take ``hooks=`` (default
``NO_HOOKS``, which does nothing) and call it at each place that matters. The services
never import a metrics library: ``outbox.metrics.Exporter`` is the Prometheus
implementation, and the CLI passes it in. A hook runs on the service's own thread (a
handler thread for ``job_started``), so it must be quick and must not raise.

The arguments are plain values and rows of ``outbox.db.rows``, so this module sits
below every service that calls it.
"""

from __future__ import annotations

from typing import Protocol

from outbox.db.rows import ClaimedJob, HandoffResult


class Hooks(Protocol):
    def relay_batch(self, result: HandoffResult) -> None:
        """A relay batch committed (``Relay.run_once``)."""

    def job_started(self, job: ClaimedJob) -> None:
        """A handler is about to run (on the thread or loop that runs it)."""

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        """An attempt was decided (``outbox.queue.policy``): ``action`` is the
        decision's (``ack``, ``retry``, ``dead``, ``snooze``, ``cancel``, ``release``,
        ``lost``), ``delay_ms`` its wait (retry, snooze), ``error`` the exception class
        it records."""

    def transaction_retried(self, operation: str) -> None:
        """A transaction is about to run ``operation`` again (deadlock, busy, ...)."""

    def worker_tick(self, held: int) -> None:
        """A worker renewed the leases of ``held`` jobs (every lease / 3)."""

    def scheduler_tick(self, recorded: int) -> None:
        """A scheduler round recorded ``recorded`` ticks."""


class NoHooks:
    """The default: every hook does nothing."""

    def relay_batch(self, result: HandoffResult) -> None:
        pass

    def job_started(self, job: ClaimedJob) -> None:
        pass

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        pass

    def transaction_retried(self, operation: str) -> None:
        pass

    def worker_tick(self, held: int) -> None:
        pass

    def scheduler_tick(self, recorded: int) -> None:
        pass


NO_HOOKS: Hooks = NoHooks()
