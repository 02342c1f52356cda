"""ordering: what ordering keys cost jobs without one, and the throughput of ordered jobs.

- Drain of keyless no-op jobs by one worker (concurrency 16, prefetch 100), beside the
  same drain with ordered jobs waiting in another queue (their rows sit past every due
  time in the claim index, so the claim's range scan stops before them): the keyless
  path's cost. Target: >= 0.95x. A keyless claim, acknowledgement and handoff run the
  same statements as before ordering keys (one column more in RETURNING); only a job
  with a key takes the key's row lock.
- Drain of ordered no-op jobs with 1, 10 and 1,000 distinct keys by the same worker:
  jobs/s. One key runs one job at a time, so with 1 key the drain is a chain of claim →
  run → ack-and-promote round trips. Target (issue 41): with 1,000 keys >= 0.7x the
  keyless drain.
- The relay, keyless intents beside intents over 1,000 ordering keys (batch 500): to the
  SQL queue (entering a key's line: one lock statement and one look for each batch) and
  to JetStream (each keyed job on its key's partition subject). Target: >= 0.7x each.
- The JetStream drain (one worker process, concurrency 16, prefetch 64; the relay fills
  the stream untimed), keyless jobs beside jobs over 1,000 keys, which run from the
  queue's 16 ordered partitions, one message in flight each. Target: >= 0.7x.

Each pair runs in the same round, interleaved with the others, on the same database
and NATS server.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from bench import data, procs, servers
from bench.core import Case, Target
from bench.plan import Ctx, Plan, rate
from bench.procs import Spec
from bench.s_nats import BATCH, NATS, _drop_streams
from bench.w_ordering import load_intents, load_ordered, ordered_intents

NAME = "ordering"
KEYLESS = "drain, keyless jobs, 1 proc c16 p100"
BESIDE = "drain, keyless jobs, ordered jobs waiting in another queue, 1 proc c16 p100"


def _ordered_label(keys: int) -> str:
    return f"drain, ordered jobs, {keys:,} keys, 1 proc c16 p100"


def _reset(url: str) -> Any:
    conn = data.connect(url)
    data.clear(conn)
    conn.execute_sql("DELETE FROM outbox_ordering_keys")
    return conn


def _drain(url: str) -> float:
    spec = Spec("bench.w_ordering:worker", {"url": url, "concurrency": 16, "prefetch": 100})
    o = procs.run([spec])
    return rate(o.total(), o.elapsed_s)


def keyless_case(url: str, n: int, beside: bool) -> Case:
    def measure() -> float:
        conn = _reset(url)
        data.load_jobs(conn, n)
        if beside:
            load_ordered(conn, n, 100, queue_suffix=".elsewhere")
        data.analyze(conn)
        conn.close()
        return _drain(url)

    return Case(BESIDE if beside else KEYLESS, measure)


def ordered_case(url: str, n: int, keys: int) -> Case:
    def measure() -> float:
        conn = _reset(url)
        load_ordered(conn, n, keys)
        data.analyze(conn)
        conn.close()
        return _drain(url)

    return Case(_ordered_label(keys), measure)


KEYS = 1_000
RATIO = 0.7


def _keys(keys: int) -> str:
    return f"{keys:,} ordering keys" if keys else "keyless"


@cache
def _intents(n: int, keys: int) -> list[tuple[Any, ...]]:
    return ordered_intents(n, keys)


def _preload(url: str, n: int, keys: int) -> None:
    conn = _reset(url)
    load_intents(conn, _intents(n, keys))
    data.analyze(conn)
    conn.raw.commit()
    conn.close()


def relay_label(target: str, keys: int) -> str:
    return f"relay → {target}, batch {BATCH}, {_keys(keys)}"


def relay_case(url: str, n: int, keys: int, jetstream: bool) -> Case:
    def measure() -> float:
        _preload(url, n, keys)
        if jetstream:
            _drop_streams()
            o = procs.run_one("bench.w_nats:relay", url=url, batch=BATCH, nats=NATS)
        else:
            o = procs.run_one("bench.w_nats:sql_relay", url=url, batch=BATCH)
        return rate(o.total(), o.elapsed_s)

    label = relay_label("JetStream" if jetstream else "SQL queue", keys)
    return Case(label, measure, unit="rows/s")


def js_drain_label(keys: int) -> str:
    return f"JetStream drain, {_keys(keys)}, 1 proc c16 p64"


def js_drain_case(url: str, n: int, keys: int) -> Case:
    def measure() -> float:
        _preload(url, n, keys)
        _drop_streams()
        procs.run_one("bench.w_nats:relay", url=url, batch=BATCH, nats=NATS)  # untimed fill
        spec = Spec("bench.w_nats:worker", {"nats": NATS, "concurrency": 16, "prefetch": 64})
        o = procs.run([spec])
        return rate(o.total(), o.elapsed_s)

    return Case(js_drain_label(keys), measure, unit="jobs/s")


def _pair(what: str, ordered: str, keyless: str) -> Target:
    return Target(f"{what}: {KEYS:,} keys >= {RATIO}x keyless", f"{NAME}: {ordered}",
                  [f"{NAME}: {keyless}"], ">=", RATIO)


def plan(ctx: Ctx) -> Plan:
    n = ctx.size(20_000, 5_000)
    small = ctx.size(3_000, 1_000)  # one key is a chain of round trips: fewer jobs
    url = servers.fresh(ctx.backend, "outbox_bench_ordering")
    p = Plan()
    p.cases += [keyless_case(url, n, False), keyless_case(url, n, True)]
    p.cases += [ordered_case(url, small if k == 1 else n, k) for k in (1, 10, 1_000)]
    p.targets.append(
        Target(
            "keyless drain beside waiting ordered jobs >= 0.95x the keyless drain",
            f"{NAME}: {BESIDE}",
            [f"{NAME}: {KEYLESS}"],
            ">=",
            0.95,
        )
    )
    for k in (1, 10):
        label = _ordered_label(k)
        p.targets.append(
            Target(f"{label}: jobs/s (no target)", f"{NAME}: {label}", None, "<=", float("inf"))
        )
    p.targets.append(_pair("SQL drain", _ordered_label(KEYS), KEYLESS))
    relayed = ctx.size(20_000, 5_000)
    for jetstream, target in ((False, "SQL queue"), (True, "JetStream")):
        p.cases += [relay_case(url, relayed, k, jetstream) for k in (0, KEYS)]
        p.targets.append(_pair(f"relay → {target}", relay_label(target, KEYS),
                               relay_label(target, 0)))
    p.cases += [js_drain_case(url, relayed, k) for k in (0, KEYS)]
    p.targets.append(_pair("JetStream drain", js_drain_label(KEYS), js_drain_label(0)))
    p.notes.append(
        f"ordering: {n:,} queued no-op jobs per keyless drain sample and per ordered drain "
        f"with 10 and 1,000 keys, {small:,} with 1 key; {relayed:,} intents per relay "
        f"sample and per JetStream drain (NATS {NATS})"
    )
    return p
