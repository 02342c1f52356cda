"""redis_worker: drain from Redis Streams, 1 process, no flags, beside the SQL queue's
drain with no flags (``s_worker.cli_defaults_case``) in the same run; and idle latency
from an entry written on the stream (as the relay writes it) to the handler's start.

The Redis server is ``OUTBOX_BENCH_REDIS`` (default the shared one at 127.0.0.1:6379/0);
only the bench queue's keys are deleted before each sample, never the database.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.data import JOB_NAME, QUEUE
from bench.plan import Ctx, Plan, rate
from bench.s_worker import cli_defaults_case

NAME = "redis_worker"
REDIS = os.environ.get("OUTBOX_BENCH_REDIS", "redis://127.0.0.1:6379/0")
SQL_LABEL = "SQL queue drain, outbox worker, 1 process, no flags"
REDIS_LABEL = "Redis drain, outbox worker --broker redis://, 1 process, no flags"
LATENCY_LABEL = "idle: entry on the stream → Redis worker → handler start"


def _client() -> Any:
    import redis

    from outbox.queue.redis.connect import parse_url

    u = parse_url(REDIS)
    return redis.Redis(host=u.host, port=u.port, db=u.db, password=u.password)


def _drop() -> None:
    from outbox.queue.redis import names

    r = _client()
    keys = [*names.job_streams(QUEUE), names.dead_stream(QUEUE), names.delayed_key(QUEUE)]
    r.delete(*keys, names.paused_key(QUEUE))
    r.close()


def _fields(seq: int, payload: Any) -> dict[str, Any]:
    import orjson

    from outbox.jetstream import codec
    from outbox.queue.redis import names

    headers = codec.job_headers(str(uuid.uuid4()), JOB_NAME, None, 0, int(time.time() * 1000))
    return {**headers, names.DATA_FIELD: orjson.dumps(payload)}


def _fill(n: int) -> None:
    """``n`` jobs on the bench queue's band 0, as the relay writes them (not timed)."""
    from outbox.queue.redis import names

    _drop()
    r = _client()
    with r.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(names.stream(QUEUE), _fields(i, data.payload(i)))
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
    r.close()


def _left() -> int:
    from outbox.queue.redis import names

    r = _client()
    try:
        return sum(int(r.xlen(s)) for s in names.job_streams(QUEUE))
    finally:
        r.close()


def _drain_case(n: int) -> Case:
    def measure() -> float:
        _fill(n)
        o = procs.run_one("bench.w_redis_worker:cli_worker", redis=REDIS)
        return rate(n - _left(), o.elapsed_s)

    return Case(REDIS_LABEL, measure)


def _latency_case(samples: int, gap: float) -> Case:
    def measure() -> dict[str, float]:
        from outbox import Registry
        from outbox.queue import WorkerConfig
        from outbox.queue.redis import names
        from outbox.queue.redis.connect import parse_url
        from outbox.queue.redis.worker import RedisWorker

        _drop()
        started: dict[int, float] = {}
        reg = Registry()

        @reg.job(JOB_NAME)
        def probe(payload: Any, ctx: Any) -> None:
            started[int(payload["seq"])] = time.monotonic()

        worker = RedisWorker(parse_url(REDIS), reg, WorkerConfig(queues={QUEUE: None}))
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        r, out = _client(), []
        try:
            time.sleep(1.0)
            for seq in range(samples + 5):
                fields = _fields(seq, {"seq": seq})
                written = time.monotonic()  # before the write: the handler may start first
                r.xadd(names.stream(QUEUE), fields)
                deadline = written + 10
                while seq not in started and time.monotonic() < deadline:
                    time.sleep(0.0002)
                if seq >= 5:  # the first few warm up the path
                    out.append((started[seq] - written) * 1000)
                time.sleep(gap)
        finally:
            worker.stop()
            thread.join(10)
            r.close()
        q = statistics.quantiles(out, n=100, method="inclusive")
        return {"p50": q[49], "p90": q[89], "p99": q[98]}

    return Case(LATENCY_LABEL, measure, unit="ms", higher_is_better=False)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 10_000)
    url = servers.fresh(ctx.backend, "outbox_bench_redis_worker")
    p = Plan()
    p.cases = [
        cli_defaults_case(url, n, SQL_LABEL),
        _drain_case(n),
        _latency_case(100 if not ctx.quick else 30, 0.05),
    ]
    p.targets = [
        Target(
            "Redis drain, 1 process, no flags >= 0.5x the SQL queue's",
            f"{NAME}: {REDIS_LABEL}",
            [f"{NAME}: {SQL_LABEL}"],
            ">=",
            0.5,
        ),
        Target(
            "idle entry → Redis worker → handler start p50 <= 10 ms",
            f"{NAME}: {LATENCY_LABEL} p50",
            None,
            "<=",
            10.0,
        ),
    ]
    p.notes.append(
        f"redis_worker: {n:,} jobs per drain sample; Redis at {REDIS}; both drains are "
        "`outbox worker` with no tuning flags (--stop-when-empty ends them); the Redis jobs "
        "are XADDed as the relay writes them; latency: the worker in one process beside "
        "the writer, its defaults (the relay's own hop is the relay's bench)"
    )
    p.after.append(_drop)
    return p
