"""nats: the relay to JetStream beside the relay to the SQL queue, JetStream worker
drain with 1 and 4 processes, and idle latency record() → handler start via JetStream.

Same run, same database server, same intents: the SQL relay case is ``s_relay``'s own.
The NATS server is ``OUTBOX_BENCH_NATS`` (default the shared one on 127.0.0.1:4222);
the bench queue's streams are deleted before each sample, so every sample starts empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import threading
import time
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.data import JOB_NAME, QUEUE
from bench.plan import Ctx, Plan, rate
from bench.s_relay import _preload

NAME = "nats"
NATS = os.environ.get("OUTBOX_BENCH_NATS", "nats://127.0.0.1:4222")
BATCH = 500
CPU_WORKERS = "— workers' CPU"
CPU_SERVER = "— nats-server's CPU (their start-up included)"
PER_CPU_S = "— jobs per worker CPU-second"


def _drop_streams(nats: str = NATS) -> None:
    import nats as nats_client

    from outbox.jetstream import names

    async def drop() -> None:
        nc = await nats_client.connect(nats.removeprefix("nats://").split(","))
        js = nc.jetstream()
        for s in (names.stream(QUEUE), names.dead_stream(QUEUE)):
            with contextlib.suppress(Exception):
                await js.delete_stream(s)
        await nc.close()

    asyncio.run(drop())


def _sql_relay_case(url: str, n: int, label: str) -> Case:
    def measure() -> float:
        _preload(url, n)
        o = procs.run_one("bench.w_nats:sql_relay", url=url, batch=BATCH)
        return rate(o.total(), o.elapsed_s)

    return Case(label, measure, unit="rows/s")


def _nats_relay_case(url: str, n: int, in_flight: int | None = None) -> Case:
    """The relay to JetStream at its defaults, or with ``in_flight`` batches at once."""

    def measure() -> float:
        _preload(url, n)
        _drop_streams()
        extra = {} if in_flight is None else {"in_flight": in_flight}
        o = procs.run_one("bench.w_nats:relay", url=url, batch=BATCH, nats=NATS, **extra)
        return rate(o.total(), o.elapsed_s)

    label = f"relay → JetStream, batch {BATCH}"
    if in_flight is not None:
        label += f", {in_flight} in flight (diagnostic)"
    return Case(label, measure, unit="rows/s")


class _Cluster:
    """Three throwaway JetStream servers with routes (``tests.nats.servers``), started at
    the first sample that needs them and stopped after the scenario."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self._dir: Any = None

    def url(self) -> str:
        if self.cluster is None:
            import tempfile
            from pathlib import Path

            from tests.nats.servers import NatsCluster

            self._dir = tempfile.TemporaryDirectory(prefix="outbox-bench-nats-")
            self.cluster = NatsCluster(Path(self._dir.name))
            self.cluster.start()
        return str(self.cluster.url)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self._dir.cleanup()
            self.cluster = None


def _cluster_relay_case(url: str, n: int, cluster: _Cluster, in_flight: int | None) -> Case:
    """The relay to a 3-node cluster, replicas 3: each PubAck waits for a quorum to store
    the message, the wait that batches in flight are meant to hide."""

    def measure() -> float:
        nats = cluster.url()
        _preload(url, n)
        _drop_streams(nats)
        extra = {} if in_flight is None else {"in_flight": in_flight}
        o = procs.run_one(
            "bench.w_nats:relay", url=url, batch=BATCH, nats=nats, replicas=3, **extra
        )
        return rate(o.total(), o.elapsed_s)

    label = f"relay → JetStream 3-node cluster, replicas 3, batch {BATCH}"
    label += f", {in_flight} in flight (diagnostic)" if in_flight is not None else ""
    return Case(label, measure, unit="rows/s")


def _fill(url: str, n: int) -> None:
    """``n`` jobs waiting in the bench stream (relayed there, not timed)."""
    _preload(url, n)
    _drop_streams()
    procs.run_one("bench.w_nats:relay", url=url, batch=BATCH, nats=NATS)


def _nats_server_cpu() -> float:
    """CPU seconds the bench's nats-server has used so far (0 when it is not local)."""
    import psutil

    port = NATS.rsplit(":", 1)[-1]
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "nats-server" and port in " ".join(p.info["cmdline"] or ()):
            t = p.cpu_times()
            return float(t.user + t.system)
    return 0.0


def _drain_case(url: str, n: int, workers: int) -> Case:
    """Jobs/s, beside the CPU it took: the workers' (cores busy) and nats-server's, and
    jobs per worker CPU-second, which stays level when processes scale with cores."""

    def measure() -> dict[str, float]:
        _fill(url, n)
        specs = [
            procs.Spec("bench.w_nats:worker", {"nats": NATS, "concurrency": 8, "prefetch": 64})
            for _ in range(workers)
        ]
        server = _nats_server_cpu()
        o = procs.run(specs)
        server = _nats_server_cpu() - server
        cpu = o.total("cpu_s")
        return {
            "": rate(o.total(), o.elapsed_s),
            CPU_WORKERS: cpu / o.elapsed_s,
            CPU_SERVER: server / o.elapsed_s,
            PER_CPU_S: o.total() / cpu if cpu else 0.0,
        }

    label = f"JetStream drain, {workers} worker process{'es' if workers > 1 else ''}"
    metrics = {
        CPU_WORKERS: ("cores", False),
        CPU_SERVER: ("cores", False),
        PER_CPU_S: ("jobs/CPU-s", True),
    }
    return Case(label, measure, unit="jobs/s", metrics=metrics)


def _fill_priorities(url: str, n: int) -> None:
    """``n`` jobs waiting in the bench stream, priorities 0..9 in turn (recorded with
    ``record()``, so each is sealed with its priority, then relayed; not timed)."""
    import psycopg

    from outbox import Job, record

    conn = data.connect(url)
    data.clear(conn)
    conn.raw.commit()
    conn.close()
    raw = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    try:
        for i in range(n):
            job = Job(JOB_NAME, data.payload(i), queue=QUEUE, priority=i % 10)
            record(raw, f"bench:prio:{i}", job)
        raw.commit()
    finally:
        raw.close()
    _drop_streams()
    procs.run_one("bench.w_nats:relay", url=url, batch=BATCH, nats=NATS)


def _priority_drain_case(url: str, n: int) -> Case:
    """The 1-process drain of ``_drain_case`` with the jobs spread over the 10 bands:
    what the band sweep costs against every job on band 0."""

    def measure() -> float:
        _fill_priorities(url, n)
        spec = procs.Spec("bench.w_nats:worker", {"nats": NATS, "concurrency": 8, "prefetch": 64})
        o = procs.run([spec])
        return rate(o.total(), o.elapsed_s)

    return Case("JetStream drain, 1 worker process, priorities 0-9 mixed", measure, unit="jobs/s")


def _effect_case(url: str, n: int, transactional: bool) -> Case:
    """Jobs/s of one worker process whose handler writes one business row per job, with
    or without the inbox (``bench.w_nats:effect_worker``): the inbox's cost per job."""

    def measure() -> float:
        from bench.w_nats import EFFECTS_DDL

        _fill(url, n)
        conn = data.connect(url)
        try:
            conn.execute_sql(EFFECTS_DDL)
            conn.execute_sql("TRUNCATE TABLE bench_effects")
            conn.execute_sql("TRUNCATE TABLE outbox_inbox")
            conn.raw.commit()
        finally:
            conn.close()
        spec = {"nats": NATS, "url": url, "concurrency": 8, "prefetch": 64}
        spec["transactional"] = transactional
        o = procs.run([procs.Spec("bench.w_nats:effect_worker", spec)])
        return rate(o.total(), o.elapsed_s)

    how = "transactional, with the inbox" if transactional else "own commit, no inbox"
    return Case(
        f"JetStream drain, 1 process, one business row per job ({how})", measure, unit="jobs/s"
    )


def _latency_case(url: str, samples: int, gap: float) -> Case:
    def measure() -> dict[str, float]:
        from outbox import Job, Registry, record
        from outbox.db.connection import Database
        from outbox.jetstream.connect import parse_url
        from outbox.jetstream.worker import JetStreamWorker
        from outbox.queue import WorkerConfig
        from outbox.relay import Relay, RelayConfig
        from outbox.relay.jetstream import JetStreamTarget

        _preload(url, 0)
        _drop_streams()
        started: dict[int, float] = {}
        reg = Registry()

        @reg.job(JOB_NAME)
        def probe(payload: Any, ctx: Any) -> None:
            started[int(payload["seq"])] = time.monotonic()

        target = JetStreamTarget(parse_url(NATS))
        target.prepare([QUEUE])
        stop = threading.Event()
        relay = Relay(
            Database(url), RelayConfig(batch_size=BATCH, poll_interval=0.01), target=target
        )
        worker = JetStreamWorker(
            parse_url(NATS), reg, WorkerConfig(queues={QUEUE: None}, concurrency=4, sleep=1.0)
        )
        threads = [
            threading.Thread(target=relay.watch, args=(stop,), daemon=True),
            threading.Thread(target=worker.run, daemon=True),
        ]
        for t in threads:
            t.start()
        import psycopg

        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
        out = []
        try:
            time.sleep(1.0)
            for seq in range(samples + 5):
                cur = conn.cursor()
                record(
                    conn, f"lat:{time.time_ns()}:{seq}", Job(JOB_NAME, {"seq": seq}, queue=QUEUE)
                )
                conn.commit()
                committed = time.monotonic()
                deadline = committed + 10
                while seq not in started and time.monotonic() < deadline:
                    time.sleep(0.0005)
                if seq >= 5:  # the first few warm up the path
                    out.append((started[seq] - committed) * 1000)
                cur.close()
                time.sleep(gap)
        finally:
            stop.set()
            worker.stop()
            for t in threads:
                t.join(10)
            relay.close()
            conn.close()
        q = statistics.quantiles(out, n=100, method="inclusive")
        return {"p50": q[49], "p90": q[89], "p99": q[98]}

    return Case(
        "idle: record() → relay → JetStream → handler", measure, unit="ms", higher_is_better=False
    )


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 10_000)
    url = servers.fresh(ctx.backend, "outbox_bench_nats")
    sql_label = f"relay → SQL queue, batch {BATCH}"
    cluster = _Cluster()
    p = Plan()
    p.cases = [
        _sql_relay_case(url, n, sql_label),
        _nats_relay_case(url, n),
        _nats_relay_case(url, n, in_flight=1),
        _cluster_relay_case(url, n, cluster, None),
        _cluster_relay_case(url, n, cluster, 1),
        _drain_case(url, n, 1),
        _drain_case(url, n, 4),
        _priority_drain_case(url, n),
        _effect_case(url, n, transactional=False),
        _effect_case(url, n, transactional=True),
        _latency_case(url, 100 if not ctx.quick else 30, 0.05),
    ]
    p.targets = [
        Target(
            "relay → JetStream >= 0.5x relay → SQL queue",
            f"{NAME}: relay → JetStream, batch {BATCH}",
            [f"{NAME}: {sql_label}"],
            ">=",
            0.5,
        ),
        Target(
            "JetStream drain: 4 processes >= 2x 1 process",
            f"{NAME}: JetStream drain, 4 worker processes",
            [f"{NAME}: JetStream drain, 1 worker process"],
            ">=",
            2.0,
        ),
        Target(
            "idle record() → JetStream → handler p50 <= 10 ms",
            f"{NAME}: idle: record() → relay → JetStream → handler p50",
            None,
            "<=",
            10.0,
        ),
    ]
    p.notes.append(
        f"nats: {n:,} intents per relay/drain sample; NATS at {NATS}; the relay to "
        "JetStream at its defaults (2 batches in flight), and with 1 to show what the second adds; "
        "drain workers: concurrency 8, prefetch 64 each; the business-row drains write one "
        "row per job into the bench database (PostgreSQL), the inbox's in the same commit; "
        "latency: relay (LISTEN) and worker in one process beside the producer"
    )
    p.after.append(_drop_streams)
    p.after.append(cluster.stop)
    return p
