"""Prometheus metrics and health probes of a running relay or worker, on one HTTP port.

``outbox relay --watch --metrics-port P`` and ``outbox worker ... --metrics-port P`` start
an ``Exporter``: ``/metrics`` (Prometheus text), ``/healthz`` (the process loop is alive)
and ``/readyz`` (the database answers and its schema is at the version this code expects),
bound to 127.0.0.1 unless ``--metrics-bind`` says otherwise.

An ``Exporter`` is the services' ``outbox.hooks.Hooks``: the CLI passes it to the
``Relay`` or ``Worker`` it runs (``hooks=``), which call it at each place that matters
(``Relay.run_once``; the worker's lease renewals and its policy's decisions; the job
runner). A library user who never serves metrics passes nothing, pays nothing and needs
no ``prometheus-client``.

Labels stay bounded: ``queue`` is one the worker serves, ``job`` a name its registry
knows (``unknown`` otherwise); never a message id. The backlog gauges are read from the
database at most every ``BACKLOG_REFRESH_S`` seconds, however often Prometheus scrapes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

from outbox.errors import ConfigurationError, OutboxError
from outbox.log import get_logger

if TYPE_CHECKING:
    from outbox.db.connection import Connection, Database
    from outbox.db.rows import ClaimedJob
    from outbox.db.rows import HandoffResult as BatchResult
    from outbox.queue.worker import Worker

log = get_logger("outbox.metrics")

BACKLOG_REFRESH_S = 5.0
READY_CACHE_S = 1.0
UNKNOWN = "unknown"
Role = Literal["relay", "worker"]


# -- the exporter --------------------------------------------------------------------


class Exporter:
    """The metrics of one relay or worker process and the HTTP server that serves them.

    ``queues`` and ``jobs`` (a ``Registry`` will do) are the label values it uses; others
    are ``unknown``. ``stale_after`` (seconds, default 60): ``/healthz`` fails when the
    loop has not reported for that long (a relay reports every batch and at least every poll, a
    worker every lease / 3).
    """

    def __init__(
        self,
        database: Database,
        role: Role,
        *,
        queues: Sequence[str] = (),
        jobs: Container[str] = (),
        stale_after: float = 60.0,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.database = database
        self.role = role
        self.queues = frozenset(queues)
        self.jobs = jobs
        self.stale_after = stale_after
        self.registry = CollectorRegistry(auto_describe=True)
        self._beat = time.monotonic()
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self._worker: Worker | None = None
        self._server: ThreadingHTTPServer | None = None
        self._reader = _Reader(database)
        # Each role exports its own metrics; the other role's are kept off the registry.
        r = self.registry if role == "relay" else None
        w = self.registry if role == "worker" else None
        self.handed_off = Counter(
            "outbox_relay_handed_off", "Intents handed off to the queue.", registry=r
        )
        self.quarantined = Counter(
            "outbox_relay_quarantined", "Intents quarantined (failed verification).", registry=r
        )
        self.batch_seconds = Histogram(
            "outbox_relay_batch_duration_seconds",
            "Time of one relay batch transaction.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        jq = ("queue", "job")
        self.succeeded = Counter(
            "outbox_jobs_succeeded", "Jobs that ran to success.", jq, registry=w
        )
        self.failed = Counter("outbox_jobs_failed", "Attempts that failed.", jq, registry=w)
        self.retried = Counter(
            "outbox_jobs_retried", "Failed attempts released for a retry.", jq, registry=w
        )
        self.dead = Counter("outbox_jobs_dead", "Jobs dead-lettered.", jq, registry=w)
        self.run_seconds = Histogram("outbox_job_run_seconds", "Handler run time.", jq, registry=w)
        self.latency = Histogram(
            "outbox_job_start_latency_seconds",
            "Due (enqueued, or available_at if later) to handler start, by the worker's clock.",
            ("queue",),
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300),
            registry=w,
        )
        self.in_flight = Gauge("outbox_jobs_in_flight", "Handlers running.", ("queue",), registry=w)
        self.renewals = Counter("outbox_lease_renewals", "Job leases renewed.", registry=w)
        self.retried_transactions = Counter(
            "outbox_transactions_retried",
            "Transactions run again after a deadlock, serialisation failure or busy database.",
            ("operation",),
            registry=self.registry,
        )
        self.collected: Any = _Collected(self)  # read at scrape time; a subclass may swap it
        self.registry.register(self.collected)

    # -- hooks ---------------------------------------------------------------------

    def relay_batch(self, result: BatchResult) -> None:
        self._beat = time.monotonic()
        if result.claimed:
            self.handed_off.inc(result.handed_off)
            self.quarantined.inc(result.quarantined)
            self.batch_seconds.observe(result.ms / 1000)

    def job_started(self, job: ClaimedJob) -> None:
        now = time.monotonic()
        with self._lock:
            self._started[job.id] = now
        queue = self._queue(job.queue)
        self.in_flight.labels(queue).inc()
        due_ms = max(job.created_at, job.available_at)
        self.latency.labels(queue).observe(max(0.0, time.time() - due_ms / 1000))

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        with self._lock:
            began = self._started.pop(job.id, None)
        if began is None:  # never started (handed back unstarted), or counted already
            return
        labels = (self._queue(job.queue), job.job_name if job.job_name in self.jobs else UNKNOWN)
        self.in_flight.labels(labels[0]).dec()
        self.run_seconds.labels(*labels).observe(time.monotonic() - began)
        if action == "ack":
            self.succeeded.labels(*labels).inc()
        elif action in ("retry", "dead"):
            self.failed.labels(*labels).inc()
            (self.dead if action == "dead" else self.retried).labels(*labels).inc()

    def transaction_retried(self, operation: str) -> None:
        self.retried_transactions.labels(operation).inc()

    def worker_tick(self, held: int) -> None:
        self._beat = time.monotonic()
        self.renewals.inc(held)

    def scheduler_tick(self, recorded: int) -> None:
        self._beat = time.monotonic()

    def _queue(self, queue: str) -> str:
        return queue if queue in self.queues else UNKNOWN

    # -- health ----------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        """Has the loop reported within ``stale_after`` seconds?"""
        quiet = time.monotonic() - self._beat
        if quiet > self.stale_after:
            return False, f"no progress for {quiet:.0f} s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Does the database answer, with the schema at the version this code expects?"""
        return self._reader.ready()

    # -- serving ---------------------------------------------------------------------

    def watch_worker(self, worker: Worker) -> None:
        """Export ``worker``'s lease losses (its stats count them)."""
        self._worker = worker

    def start(self, bind: str, port: int) -> int:
        """Serve on ``bind:port`` in a daemon thread."""
        try:
            self._server = ThreadingHTTPServer((bind, port), _handler(self))
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {bind}:{port}: {exc.strerror or type(exc).__name__}"
            ) from exc
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, name="outbox-metrics", daemon=True
        ).start()
        served = int(self._server.server_address[1])
        log.info("metrics.serving", bind=bind, port=served, paths="/metrics /healthz /readyz")
        return served

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._reader.close()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


@contextmanager
def serving(
    database: Database,
    role: Role,
    port: int | None,
    bind: str = "127.0.0.1",
    *,
    queues: Sequence[str] = (),
    jobs: Container[str] = (),
) -> Iterator[Exporter | None]:
    """An exporter on ``bind:port`` for the block (nothing when ``port`` is None).

    For the block the exporter is also ``database``'s retry hook: every connection opened
    from it counts its retried transactions."""
    if port is None:
        yield None
        return
    exporter = Exporter(database, role, queues=queues, jobs=jobs)
    exporter.start(bind, port)
    before, database.on_retry = database.on_retry, exporter.transaction_retried
    try:
        yield exporter
    finally:
        database.on_retry = before
        exporter.stop()


class _Reader:
    """The exporter's own connection: backlog gauges and readiness, rate-limited."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._backlog: dict[str, tuple[float, Any]] = {}
        self._ready: tuple[float, tuple[bool, str]] = (0.0, (False, "not checked yet"))

    def read(self, what: str, fn: Any) -> Any:
        """``fn(conn)`` on the reader's connection; reconnects after a failure."""
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self.database.connect()
                return self._conn.read(fn, operation=what)
            except OutboxError:
                self.close()
                raise

    def backlog(self, name: str, fn: Any) -> Any:
        """``fn(conn)``'s answer, read at most every ``BACKLOG_REFRESH_S`` seconds (None
        while the database does not answer)."""
        at, value = self._backlog.get(name, (0.0, None))
        if value is None or time.monotonic() - at >= BACKLOG_REFRESH_S:
            try:
                value = self.read("metrics", fn)
            except OutboxError as exc:
                log.warning("metrics.backlog_failed", error=type(exc.__cause__ or exc).__name__)
                value = None
            self._backlog[name] = (time.monotonic(), value)
        return value

    def ready(self) -> tuple[bool, str]:
        at, answer = self._ready
        if time.monotonic() - at < READY_CACHE_S:
            return answer
        from outbox.db.migrate import REQUIRED, applied_versions

        try:
            versions = self.read("readyz", applied_versions)
            have = max(versions, default=0)
            if REQUIRED in versions:  # the contract step may still be held back
                answer = (True, f"ok: schema version {have}")
            else:
                answer = (
                    False,
                    f"schema at version {have}, expected {REQUIRED}: run outbox migrate",
                )
        except OutboxError as exc:
            answer = (False, f"database unavailable ({type(exc.__cause__ or exc).__name__})")
        self._ready = (time.monotonic(), answer)
        return answer

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Collected:
    """What is read at scrape time: backlog gauges (rate-limited) and lease losses."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        e = self.exporter
        if e.role == "relay":
            backlog = e._reader.backlog("relay", _relay_backlog)
            if backlog is not None:
                pending, oldest, now_ms = backlog
                yield GaugeMetricFamily(
                    "outbox_pending_intents", "Intents waiting for the relay.", value=pending
                )
                age = 0.0 if oldest is None else max(0, int(now_ms) - int(oldest)) / 1000
                yield GaugeMetricFamily(
                    "outbox_oldest_pending_age_seconds",
                    "Age of the oldest pending intent (0 when none is).",
                    value=age,
                )
        else:
            yield from _queue_gauges(e)
            lost = CounterMetricFamily("outbox_leases_lost", "Job leases found lost.")
            lost.add_metric([], e._worker.stats.lost if e._worker else 0)
            yield lost


def _relay_backlog(conn: Connection) -> tuple[int, int | None, int]:
    return conn.driver.outbox_backlog()


def _queue_gauges(e: Exporter) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    from outbox.db.rows import QueueCounts

    read = e._reader.backlog("queues", lambda c: (c.driver.queue_counts(), c.driver.clock_now()))
    if read is None:
        return
    rows, now = read  # ages by the database's clock, which stamped the jobs
    ready = GaugeMetricFamily("outbox_queue_ready_jobs", "Jobs due and not held.", labels=["queue"])
    counted = {r.queue: r for r in rows if r.queue in e.queues}
    oldest = GaugeMetricFamily(
        "outbox_queue_oldest_ready_age_seconds",
        "How long the oldest ready job has been due (0 when none is).",
        labels=["queue"],
    )
    for name in sorted(e.queues):
        counts = counted.get(name, QueueCounts(name))
        ready.add_metric([name], counts.ready)
        oldest_ready = counts.oldest_ready_ms
        age = 0.0 if oldest_ready is None else max(0.0, now - oldest_ready) / 1000
        oldest.add_metric([name], age)
    yield ready
    yield oldest


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                from prometheus_client import CONTENT_TYPE_LATEST

                self._send(200, exporter.render(), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, why = exporter.healthy() if path == "/healthz" else exporter.ready()
                self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            pass  # scrapes every few seconds would flood the log

    return Handler
