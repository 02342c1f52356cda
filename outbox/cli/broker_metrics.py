"""``outbox worker --broker --metrics-port``: the SQL worker's exporter
(``outbox.metrics``), with what it reads from the database read from the broker
(JetStream or Redis: ``jetstream_pending``, ``redis_pending``).

The job metrics are the same hooks with the same names and meaning
(``outbox_jobs_succeeded/failed/retried/dead``, ``outbox_job_run_seconds``,
``outbox_job_start_latency_seconds``, ``outbox_jobs_in_flight``,
``outbox_lease_renewals`` — here in-progress acks —, and
``outbox_transactions_retried`` for the inbox's transactions). Read at scrape time,
at most every ``BACKLOG_REFRESH_S`` seconds: ``outbox_queue_ready_jobs`` is the
consumer's count of messages not yet delivered (on Redis: the band streams' entries not
yet delivered to the group). Not exported, having no meaning here:
``outbox_queue_oldest_ready_age_seconds`` (a stream keeps no due time per message that
can be asked for without reading it) and ``outbox_leases_lost`` (JetStream redelivers
after the ack wait; no worker finds out). ``/readyz`` is the broker connection (and,
with an inbox, the database at its schema version); ``/healthz`` is the worker loop,
which reports every lease / 3.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Container, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from outbox.db.connection import Database
from outbox.jetstream import names
from outbox.jetstream.url import BrokerUrl
from outbox.log import get_logger
from outbox.metrics import BACKLOG_REFRESH_S, Exporter
from outbox.queue.redis.url import RedisUrl

if TYPE_CHECKING:
    from outbox.jetstream.connect import Broker

log = get_logger("outbox.metrics")


Pending = Callable[[list[str]], dict[str, int]]


class BrokerExporter(Exporter):
    """The worker exporter of a broker worker; ``connected`` says whether the worker's
    broker connection is up, ``read_pending`` reads each queue's backlog, and
    ``shown`` names the broker (never a password)."""

    def __init__(
        self,
        shown: str,
        database: Database | None,
        connected: Callable[[], bool],
        read_pending: Pending,
        *,
        queues: Sequence[str],
        jobs: Container[str],
    ) -> None:
        super().__init__(cast(Database, database), "worker", queues=queues, jobs=jobs)
        self.shown, self.inbox_database, self.connected = shown, database, connected
        self.read_pending = read_pending
        self.registry.unregister(self.collected)
        self.collected = _BrokerGauges(self)
        self.registry.register(self.collected)
        self._read: tuple[float, dict[str, int] | None] = (0.0, None)

    def ready(self) -> tuple[bool, str]:
        if not self.connected():
            return False, f"not connected to the broker at {self.shown}"
        if self.inbox_database is not None:
            return super().ready()  # the inbox's database, at its schema version
        return True, "ok: broker connected"

    def pending(self) -> dict[str, int] | None:
        """Messages not yet delivered per queue, read at most every BACKLOG_REFRESH_S."""
        at, value = self._read
        if value is not None and time.monotonic() - at < BACKLOG_REFRESH_S:
            return value
        try:
            value = self.read_pending(sorted(self.queues))
        except Exception as exc:
            log.warning("metrics.backlog_failed", error=type(exc).__name__)
            value = None
        self._read = (time.monotonic(), value)
        return value


def jetstream_pending(url: BrokerUrl) -> Pending:
    """Each queue's messages not yet delivered, from its band consumers."""

    def read(queues: list[str]) -> dict[str, int]:
        from outbox.jetstream.connect import Broker

        with Broker(url) as broker:
            return broker.call(_pending(broker, queues), 5.0)

    return read


def redis_pending(url: RedisUrl) -> Pending:
    """Each queue's entries not yet delivered to the group, over its band streams."""

    def read(queues: list[str]) -> dict[str, int]:
        return asyncio.run(_redis_pending(url, queues))

    return read


async def _redis_pending(url: RedisUrl, queues: list[str]) -> dict[str, int]:
    from outbox.queue.redis import names as redis_names
    from outbox.queue.redis.connect import client

    r = client(url)
    try:
        out = {}
        for queue in queues:
            out[queue] = 0
            for stream in redis_names.band_streams(queue):
                if not await r.exists(stream):
                    continue
                lags = [int(g.get("lag") or 0) for g in await r.xinfo_groups(stream)
                        if g.get("name") in (redis_names.GROUP, redis_names.GROUP.encode())]
                # No group yet (no worker has read the stream): every entry is undelivered.
                out[queue] += lags[0] if lags else int(await r.xlen(stream))
        return out
    finally:
        await r.aclose()


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
