"""``outbox worker --broker --metrics-port``: the SQL worker's exporter
(``outbox.metrics``), with what it reads from the database read from JetStream.

The job metrics are the same hooks with the same names and meaning
(``outbox_jobs_succeeded/failed/retried/dead``, ``outbox_job_run_seconds``,
``outbox_job_start_latency_seconds``, ``outbox_jobs_in_flight``,
``outbox_lease_renewals`` — here in-progress acks —, and
``outbox_transactions_retried`` for the inbox's transactions). Read at scrape time,
at most every ``BACKLOG_REFRESH_S`` seconds: ``outbox_queue_ready_jobs`` is the
consumer's count of messages not yet delivered. Not exported, having no meaning here:
``outbox_queue_oldest_ready_age_seconds`` (a stream keeps no due time per message that
can be asked for without reading it) and ``outbox_leases_lost`` (JetStream redelivers
after the ack wait; no worker finds out). ``/readyz`` is the broker connection (and,
with an inbox, the database at its schema version); ``/healthz`` is the worker loop,
which reports every lease / 3.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, cast

from outbox.db.connection import Database
from outbox.jetstream import names
from outbox.jetstream.connect import Broker, BrokerUrl
from outbox.log import get_logger
from outbox.metrics import BACKLOG_REFRESH_S, Exporter

log = get_logger("outbox.metrics")


class BrokerExporter(Exporter):
    """The worker exporter of a JetStream worker; ``connected`` says whether the
    worker's broker connection is up."""

    def __init__(
        self,
        url: BrokerUrl,
        database: Database | None,
        connected: Callable[[], bool],
        *,
        queues: Sequence[str],
        jobs: Container[str],
    ) -> None:
        super().__init__(cast(Database, database), "worker", queues=queues, jobs=jobs)
        self.url, self.inbox_database, self.connected = url, database, connected
        self.registry.unregister(self.collected)
        self.collected = _BrokerGauges(self)
        self.registry.register(self.collected)
        self._read: tuple[float, dict[str, int] | None] = (0.0, None)

    def ready(self) -> tuple[bool, str]:
        if not self.connected():
            return False, f"not connected to the broker at {self.url.shown}"
        if self.inbox_database is not None:
            return super().ready()  # the inbox's database, at its schema version
        return True, "ok: broker connected"

    def pending(self) -> dict[str, int] | None:
        """Messages not yet delivered per queue, read at most every BACKLOG_REFRESH_S."""
        at, value = self._read
        if value is not None and time.monotonic() - at < BACKLOG_REFRESH_S:
            return value
        try:
            with Broker(self.url) as broker:
                value = broker.call(_pending(broker, sorted(self.queues)), 5.0)
        except Exception as exc:
            log.warning("metrics.backlog_failed", error=type(exc).__name__)
            value = None
        self._read = (time.monotonic(), value)
        return value


async def _pending(broker: Broker, queues: list[str]) -> dict[str, int]:
    out = {}
    for queue in queues:
        out[queue] = 0  # no stream or consumer yet: nothing waits
        for band in names.BANDS:  # each priority band's consumer
            try:
                info = await broker.js.consumer_info(names.stream(queue), names.consumer(band))
            except Exception:
                continue
            out[queue] += int(info.num_pending or 0)
    return out


class _BrokerGauges:
    def __init__(self, exporter: BrokerExporter) -> None:
        self.exporter = exporter

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        pending = self.exporter.pending()
        if pending is None:
            return
        ready = GaugeMetricFamily(
            "outbox_queue_ready_jobs", "Jobs due and not held.", labels=["queue"]
        )
        for queue, n in sorted(pending.items()):
            ready.add_metric([queue], n)
        yield ready
