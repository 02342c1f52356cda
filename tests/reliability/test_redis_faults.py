"""The Redis Streams broker's faults that the kill tests of ``tests/redis`` do not cover,
each a row of the reliability report: a queue's streams deleted (``DEL``, as an operator
or a ``FLUSHDB`` would) under a running ``outbox worker --broker redis://`` process, and
entries that are not ours on a stream among real jobs.

The relay kills, the AOF restart and the worker kills (with and without the inbox) are
``tests/redis/test_relay_faults.py`` and ``test_worker_faults.py``; they report their rows
through the same ``tests.reliability.rows``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import orjson

from outbox.jetstream import codec
from outbox.queue.redis import names
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import finish
from tests.redis import entries
from tests.redis.test_worker_faults import _worker
from tests.redis.test_worker_redis import runs
from tests.reliability import rows
from tests.reliability.conftest import SOAK_SIZED

rq, ledger = entries.rq, entries.ledger  # fixtures, by name
DELETES, BATCH = (10, 500) if SOAK_SIZED else (3, 40)
GOOD, FOREIGN_ROUNDS = (5_000, 40) if SOAK_SIZED else (150, 2)
TRAFFIC = "1 worker `--broker redis://` (c2, p2, lease 1 s)"


def _redis_version(r: Any) -> str:
    return f"Redis {r.info('server')['redis_version']}"


def _wait(done: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def _started(ledger: Path, batch: list[str]) -> bool:
    done = runs(ledger)
    return any(done[m] for m in batch)


def test_streams_deleted_under_a_running_worker_are_made_again_and_no_later_job_is_lost(
    rq: Any, ledger: Path, tmp_path: Path
) -> None:
    """Each round deletes every stream of the queue (and so its consumer group) while the
    worker blocks on them, then adds a batch at once: the worker meets ``NOGROUP``, makes
    the groups again and runs the batch. Recovery: from the delete to the first job of the
    next batch started."""
    r, queue = rq
    began = time.monotonic()
    proc = _worker(sqlite_url(tmp_path), queue, ledger)
    added: list[str] = []
    recovery: list[float] = []
    try:
        added += [entries.add_job(r, queue, "t.ok", {"i": i}) for i in range(BATCH)]
        _wait(lambda: len(runs(ledger)) == len(added), 60, "the first batch")
        for _ in range(DELETES):
            r.delete(*names.job_streams(queue))
            deleted_at = time.monotonic()
            batch = [entries.add_job(r, queue, "t.ok", {"i": i}) for i in range(BATCH)]
            added += batch
            _wait(lambda b=batch: _started(ledger, b), 60, "a job after the delete")  # type: ignore[misc]
            recovery.append(time.monotonic() - deleted_at)
            total = len(added)
            _wait(lambda n=total: len(runs(ledger)) == n, 60, "the batch after it")  # type: ignore[misc]
    finally:
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc, 30)
    assert code == 0, err[-2000:]
    assert "worker.group_recreated" in err
    done = runs(ledger)
    lost = [m for m in added if not done[m]]
    extra = sum(done.values()) - len(done)
    assert lost == [] and extra == 0  # nothing was killed: nothing may run twice
    assert entries.left(r, queue) == 0
    rows.report(
        rows.Row(
            fault=f"a queue's streams deleted under a running worker ({DELETES}x)",
            backend=_redis_version(r),
            traffic=f"batches of {BATCH} jobs added right after each delete; {TRAFFIC}",
            jobs=len(added),
            faults=DELETES,
            lost=len(lost),
            double_handoffs=None,
            extra_executions=extra,
            extra_bound=0,
            max_recovery_s=round(max(recovery), 2),
            minutes=round((time.monotonic() - began) / 60, 1),
        )
    )


# Entries that are not ours, each a way a stream gets one: another producer's XADD, a
# truncated copy, a hand-typed test entry. None may be dropped, none retried for ever.
ID_A, ID_B = "0b7f5ba4-1d5e-4c43-a4f5-3c4a8d2f7e11", "7c1e2a0d-9a4b-4f21-8f3e-2b6d5c4a3e10"
FOREIGN: list[dict[str, Any]] = [
    {"data": b'{"order": 7}'},  # no headers at all
    {codec.MESSAGE_ID: "not-a-uuid", codec.JOB: "t.ok", "data": b"{}"},
    {codec.MESSAGE_ID: ID_A, codec.JOB: "t.ok", "data": b"\xff\xfe not utf-8"},
    {codec.MESSAGE_ID: ID_B, codec.JOB: "t.ok", "data": b"{not json"},
    {codec.MESSAGE_ID: "3d2c1b0a-8e7f-4a6b-9c5d-1e2f3a4b5c6d", codec.JOB: "no such/name!"},
    {"celery": b"task", "body": b"\x80\x04\x95 pickled"},  # another library's entry
]


def test_entries_that_are_not_ours_are_parked_on_the_dead_stream_once_and_jobs_run(
    rq: Any, ledger: Path, tmp_path: Path
) -> None:
    r, queue = rq
    good: list[str] = []
    foreign = 0
    per_round = GOOD // FOREIGN_ROUNDS
    for _ in range(FOREIGN_ROUNDS):  # foreign entries spread among the jobs
        for fields in FOREIGN:
            good += [entries.add_job(r, queue, "t.ok", {"i": i}) for i in range(per_round // 6)]
            r.xadd(names.stream(queue), fields)
            foreign += 1
    began = time.monotonic()
    proc = _worker(sqlite_url(tmp_path), queue, ledger)
    try:
        _wait(lambda: len(runs(ledger)) == len(good) and r.xlen(names.dead_stream(queue))
              >= foreign, 120, "every job run and every foreign entry parked")  # fmt: skip
        time.sleep(2.5)  # past two leases: a foreign entry retried would show now
    finally:
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc, 30)
    assert code == 0, err[-2000:]
    parked = [orjson.loads(f[b"data"]) for _, f in r.xrange(names.dead_stream(queue))]
    assert len(parked) == foreign  # each once: not dropped, not parked twice
    assert {p["exception_class"] for p in parked} == {codec.FOREIGN_CLASS}
    assert {p["attempts"] for p in parked} == {1}  # delivered once, never retried
    kept = {bytes.fromhex(p["payload"]) if p["payload_encoding"] == "hex"
            else p["payload"].encode() for p in parked}  # fmt: skip
    assert kept == {f.get("data", b"") for f in FOREIGN}  # the body kept as it came
    done = runs(ledger)
    lost = [m for m in good if not done[m]]
    extra = sum(done.values()) - len(done)
    assert lost == [] and extra == 0
    assert entries.left(r, queue) == 0
    assert r.xpending(names.stream(queue), names.GROUP)["pending"] == 0
    assert "order" not in err and "pickled" not in err  # logs name the entry, never a body
    rows.report(
        rows.Row(
            fault=f"entries that are not ours on the stream ({foreign} among the jobs)",
            backend=_redis_version(r),
            traffic=f"{len(good)} jobs and {foreign} foreign entries of {len(FOREIGN)} "
            f"kinds; {TRAFFIC}",
            jobs=len(good) + foreign,
            faults=foreign,
            lost=len(lost) + foreign - len(parked),
            double_handoffs=None,
            extra_executions=extra,
            extra_bound=0,
            minutes=round((time.monotonic() - began) / 60, 1),
            figures={"parked on the dead stream": f"{len(parked)}/{foreign}",
                     "deliveries of a foreign entry": max(p["attempts"] for p in parked)},
        )
    )
