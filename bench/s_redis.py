"""redis: the relay to Redis Streams beside the relay to the SQL queue, same run, same
database server, same intents (the SQL relay case is ``s_nats``'s own).

The Redis is ``OUTBOX_BENCH_REDIS`` (default the shared one, 127.0.0.1:6379/0); the
bench queue's keys are deleted before each sample, so every sample starts empty. The
figures name the server's durability (``appendfsync``), since with ``always`` every
batch waits for an fsync.
"""

from __future__ import annotations

import os

from bench import procs, servers
from bench.core import Case, Target
from bench.data import QUEUE
from bench.plan import Ctx, Plan, rate
from bench.s_nats import BATCH, _sql_relay_case
from bench.s_relay import _preload

NAME = "redis"
REDIS = os.environ.get("OUTBOX_BENCH_REDIS", "redis://127.0.0.1:6379/0")


def _drop_keys() -> None:
    import redis

    from outbox.queue.redis import names

    client = redis.Redis.from_url(REDIS)
    try:
        pattern = names.tag(QUEUE).replace("{", "\\{").replace("}", "\\}") + ":*"
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    finally:
        client.close()


def _fsync() -> str:
    import redis

    client = redis.Redis.from_url(REDIS, decode_responses=True)
    try:
        found = client.config_get("append*")
        return f"appendonly {found.get('appendonly')}, appendfsync {found.get('appendfsync')}"
    except redis.ResponseError:
        return "durability unknown (CONFIG refused)"
    finally:
        client.close()


def _redis_relay_case(url: str, n: int, in_flight: int | None = None) -> Case:
    def measure() -> float:
        _preload(url, n)
        _drop_keys()
        extra = {} if in_flight is None else {"in_flight": in_flight}
        o = procs.run_one("bench.w_redis:relay", url=url, batch=BATCH, redis=REDIS, **extra)
        return rate(o.total(), o.elapsed_s)

    label = f"relay → Redis Streams, batch {BATCH}"
    if in_flight is not None:
        label += f", {in_flight} in flight (diagnostic)"
    return Case(label, measure, unit="rows/s")


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(50_000, 10_000)
    url = servers.fresh(ctx.backend, "outbox_bench_redis")
    sql_label = f"relay → SQL queue, batch {BATCH}"
    p = Plan()
    p.cases = [
        _sql_relay_case(url, n, sql_label),
        _redis_relay_case(url, n),
        _redis_relay_case(url, n, in_flight=1),
    ]
    p.targets = [
        Target(
            "relay → Redis >= 0.5x relay → SQL queue",
            f"{NAME}: relay → Redis Streams, batch {BATCH}",
            [f"{NAME}: {sql_label}"],
            ">=",
            0.5,
        ),
    ]
    p.notes.append(
        f"redis: {n:,} intents per relay sample; Redis at {REDIS} ({_fsync()}); the relay "
        "to Redis at its defaults (2 batches in flight, dedupe window 120 s, no length "
        "limit, no WAIT), and with 1 in flight"
    )
    p.after.append(_drop_keys)
    return p
