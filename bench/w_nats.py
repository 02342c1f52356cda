"""Measured children for ``s_nats``: the relay to JetStream and JetStream workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.data import JOB_NAME, QUEUE


def relay(
    url: str, batch: int, nats: str, in_flight: int | None = None, replicas: int = 1
) -> Callable[[], dict[str, Any]]:
    """The relay with the JetStream target (its defaults, or ``in_flight`` batches at
    once; new streams with ``replicas``), connected and its stream ready before GO."""
    from outbox.db.connection import Database
    from outbox.jetstream.connect import parse_url
    from outbox.jetstream.provision import StreamSettings
    from outbox.relay import Relay, RelayConfig
    from outbox.relay.jetstream import JetStreamSettings, JetStreamTarget

    streams = StreamSettings(replicas=replicas)
    settings = JetStreamSettings(streams)
    if in_flight is not None:
        settings = JetStreamSettings(streams, in_flight=in_flight)
    target = JetStreamTarget(parse_url(nats), settings)
    target.prepare([QUEUE])
    return relay_work(Relay(Database(url), RelayConfig(batch_size=batch), target=target))


def relay_work(r: Any) -> Callable[[], dict[str, Any]]:
    """The measured part of a relay child: ``r`` connected before GO (a lane opens its
    own), then run until nothing is pending."""
    r._conn.get()

    def work() -> dict[str, Any]:
        totals = r.run()
        r.close()
        return {"count": totals.handed_off}

    return work


def worker(nats: str, concurrency: int, prefetch: int) -> Callable[[], dict[str, Any]]:
    """A JetStream worker draining the bench queue (no-op handler), stop-when-empty."""
    from bench.w_outbox import registry
    from outbox.jetstream.connect import parse_url
    from outbox.jetstream.worker import JetStreamWorker
    from outbox.queue import WorkerConfig

    config = WorkerConfig(
        queues={QUEUE: None},
        concurrency=concurrency,
        prefetch=prefetch,
        stop_when_empty=True,
        sleep=0.5,
    )
    w = JetStreamWorker(parse_url(nats), registry(), config)

    def work() -> dict[str, Any]:
        cpu = time.process_time()
        succeeded = w.run().succeeded
        return {"count": succeeded, "cpu_s": time.process_time() - cpu}

    return work


def sql_relay(url: str, batch: int) -> Callable[[], dict[str, Any]]:
    """The same relay to the SQL queue, connected before GO (the reference figure)."""
    from outbox.db.connection import Database
    from outbox.relay import Relay, RelayConfig

    return relay_work(Relay(Database(url), RelayConfig(batch_size=batch)))


EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS bench_effects (message_id VARCHAR(64) PRIMARY KEY)"


def effect_worker(
    nats: str, url: str, concurrency: int, prefetch: int, transactional: bool
) -> Callable[[], dict[str, Any]]:
    """A JetStream worker whose handler writes one business row per job: on its own
    autocommit connection (no inbox: a redelivery writes again, absorbed here by the
    key), or ``transactional`` on ``ctx.connection`` with the inbox id in the same
    commit. The difference is the inbox's cost per job (PostgreSQL)."""
    import threading

    import psycopg

    from outbox import Registry
    from outbox.db.connection import Database
    from outbox.jetstream.connect import parse_url
    from outbox.jetstream.worker import JetStreamWorker
    from outbox.queue import WorkerConfig

    insert = "INSERT INTO bench_effects (message_id) VALUES (%s) ON CONFLICT DO NOTHING"
    raw_url = url.replace("postgresql+psycopg://", "postgresql://")
    reg = Registry()
    local = threading.local()
    if transactional:

        @reg.job(JOB_NAME, transactional=True)
        def in_tx(payload: Any, ctx: Any) -> None:
            ctx.connection.execute(insert, (ctx.message_id,))

    else:

        @reg.job(JOB_NAME)
        def own_commit(payload: Any, ctx: Any) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = psycopg.connect(raw_url, autocommit=True)
            conn.execute(insert, (ctx.message_id,))

    config = WorkerConfig(
        queues={QUEUE: None},
        concurrency=concurrency,
        prefetch=prefetch,
        stop_when_empty=True,
        sleep=0.5,
    )
    database = Database(url) if transactional else None
    w = JetStreamWorker(parse_url(nats), reg, config, database=database)

    def work() -> dict[str, Any]:
        cpu = time.process_time()
        succeeded = w.run().succeeded
        return {"count": succeeded, "cpu_s": time.process_time() - cpu}

    return work
