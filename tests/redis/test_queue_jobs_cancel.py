"""``outbox queue jobs`` and ``outbox queue cancel`` with ``--broker redis://``, as with
``--broker nats://`` and on SQL: the listing's states without a payload, a cancel that
dead-letters a waiting job (class ``cancelled``) and flags a held one for its worker
(the handler told, the key held until it returns, an ack that finds the flag), and bad
input (an unknown job id, an unknown queue, a queue whose streams were deleted)
answered in one line with every key of the queue as it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from outbox import Registry
from outbox.db.rows import ClaimedJob
from outbox.queue.config import WorkerConfig, WorkerStats
from outbox.queue.redis import control, names
from outbox.queue.redis.connect import parse_url
from outbox.queue.redis.lane import job_fields
from outbox.queue.redis.worker import RedisWorker
from tests.fixtures.databases import sqlite_url
from tests.fixtures.supervisor import ROOT
from tests.redis import entries
from tests.redis.test_ordering import _add_keyed
from tests.redis.test_queue_control_redis import cli
from tests.redis.test_worker_redis import runs, work

rq, ledger = entries.rq, entries.ledger  # fixtures, by name
SECRET = {"secret": "payload-marker"}


def snapshot(r: redis.Redis, queue: str) -> dict[bytes, Any]:
    """Every key of ``queue`` with its whole content (a changed entry shows here)."""
    pattern = names.tag(queue).replace("{", "\\{").replace("}", "\\}") + "*"
    out: dict[bytes, Any] = {}
    for key in r.scan_iter(match=pattern):
        kind = r.type(key)
        if kind == b"stream":
            out[key] = (r.xrange(key), r.xinfo_groups(key))
        elif kind == b"zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        else:
            out[key] = r.dump(key)
    return out


def delayed(r: redis.Redis, queue: str, due_ms: int) -> str:
    """A job waiting in the delayed set, as a worker's retry leaves it there."""
    message_id = str(uuid.uuid4())
    job = ClaimedJob(
        id=0, message_id=message_id, queue=queue, job_name="t.ok", payload='{"later": 1}',
        attempts=1, max_attempts=None, created_at=int(time.time() * 1000), available_at=0,
    )  # fmt: skip
    fields = job_fields(job, due_ms, snoozes=0, before=1)
    member = orjson.dumps({"s": 0, "u": uuid.uuid4().hex, "f": fields})
    r.zadd(names.delayed_key(queue), {member: due_ms})
    return message_id


def deliver(r: redis.Redis, queue: str, n: int) -> None:
    """``n`` entries read by a consumer that keeps them (as a worker running them)."""
    r.xgroup_create(names.stream(queue), names.GROUP, id="0", mkstream=True)
    r.xreadgroup(names.GROUP, "held-by-test", {names.stream(queue): ">"}, count=n)


def listed(tmp_path: Path, queue: str) -> dict[str, list[str]]:
    out = cli(tmp_path, "queue", "jobs", "--queue", queue)
    assert out.exit_code == 0, out.output
    assert "payload-marker" not in out.output and "later" not in out.output
    return {line.split()[0]: line.split() for line in out.output.splitlines()[1:-1]}


def test_jobs_lists_ready_reserved_and_delayed_jobs_without_payloads(
    rq: Any, tmp_path: Path
) -> None:
    r, queue = rq
    held = entries.add_job(r, queue, "t.ok", SECRET)
    ready = entries.add_job(r, queue, "t.ok", SECRET, priority=3)
    later = time.time() * 1000 + 3_600_000
    early = entries.add_job(r, queue, "t.ok", SECRET, available_at_ms=int(later))
    deliver(r, queue, 1)
    waiting = delayed(r, queue, int(later))
    rows = listed(tmp_path, queue)
    assert {m: row[3] for m, row in rows.items()} == {
        held: "reserved", ready: "ready", early: "delayed", waiting: "delayed"
    }
    assert rows[ready][4] == "3" and rows[held][4] == "0"
    assert rows[waiting][-1] == "-"  # in the delayed set, not on a stream
    assert rows[held][-1] == r.xrange(names.stream(queue), count=1)[0][0].decode()
    out = cli(tmp_path, "queue", "jobs", "2", "--queue", queue)
    assert out.output.splitlines()[-1] == "(2 shown, LIMIT 2; pass a larger LIMIT to see more)"


def test_cancel_dead_letters_a_waiting_job_and_a_delayed_one(
    rq: Any, tmp_path: Path, ledger: Path
) -> None:
    r, queue = rq
    gone, kept = entries.add_job(r, queue, "t.ok", SECRET), entries.add_job(r, queue, "t.ok")
    waiting = delayed(r, queue, int(time.time() * 1000) + 3_600_000)
    for message_id in (gone, waiting):
        done = cli(tmp_path, "queue", "cancel", message_id)
        assert done.exit_code == 0, done.output
        assert done.output == f"cancelled {message_id} (moved to the dead letters)\n"
    assert set(listed(tmp_path, queue)) == {kept}
    dead = {d["message_id"]: d for d in entries.dead(r, queue)}
    assert set(dead) == {gone, waiting}
    assert {d["exception_class"] for d in dead.values()} == {"cancelled"}
    work(queue)
    assert runs(ledger) == {kept: 1}  # a cancelled job never runs
    assert cli(tmp_path, "queue", "retry", gone).exit_code == 0  # the dead letter keeps it
    work(queue)
    assert runs(ledger) == {kept: 1, gone: 1}


@pytest.mark.slow
def test_cancel_of_running_jobs_in_a_worker_process_reaches_their_handlers_and_holds_the_key(
    rq: Any, tmp_path: Path, ledger: Path
) -> None:
    """A real ``outbox worker --broker redis://`` process runs a keyed sync job that
    watches ``ctx.cancelled`` and a keyless async one; both are cancelled from the CLI
    while they run. The sync handler sees ``ctx.cancelled``, the async one is cancelled,
    both are recorded as cancelled by the worker, and the key's next job starts only
    after the cancelled one returned (its entry kept the key's partition meanwhile)."""
    r, queue = rq
    watched = _add_keyed(r, queue, "k", "t.watch", {"s": 60})
    after = _add_keyed(r, queue, "k", "t.ok")  # the same key: waits for the one before
    sleeping = entries.add_job(r, queue, "t.aslow", {"s": 60})
    argv = [sys.executable, "-m", "outbox", "--database-url", sqlite_url(tmp_path),
            "worker", queue, "--app", "tests.nats.app:registry", "--broker", entries.URL,
            "--concurrency", "2", "--lease", "4", "--sleep", "0.1",
            "--stop-when-empty"]  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as sink:
        worker = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while runs(ledger, "start")[watched] + runs(ledger, "start")[sleeping] < 2:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker never started both jobs"
            time.sleep(0.05)
        assert listed(tmp_path, queue)[watched][3] == "reserved"
        for message_id in (watched, sleeping):
            flagged = cli(tmp_path, "queue", "cancel", message_id)
            assert flagged.exit_code == 0, flagged.output
            assert "a worker has it; it will be recorded as cancelled" in flagged.output
        assert worker.wait(90) == 0, (tmp_path / "worker.log").read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    lines = [line.split() for line in ledger.read_text().splitlines()]
    steps = [(p[0], p[3]) for p in lines]
    # A lease of 4 s, renewed each 1.3 s: a loop starved past it (a loaded machine) would
    # let the job run twice, which is what a lease is; the cancel is read within 1.3 s.
    assert [st for m, st in steps if m == watched] == ["start", "saw-cancel"], steps
    assert [st for m, st in steps if m == sleeping] == ["start"]  # cancelled in its await
    assert steps.index((after, "ran")) > steps.index((watched, "saw-cancel"))  # no overlap
    assert runs(ledger) == {after: 1}
    dead = {d["message_id"]: d for d in entries.dead(r, queue)}
    assert set(dead) == {watched, sleeping}
    assert {(d["exception_class"], d["attempts"]) for d in dead.values()} == {("cancelled", 1)}
    assert entries.left(r, queue) == 0
    assert not r.exists(names.cancel_key(queue))  # each flag went with its dead letter


def test_a_job_cancelled_while_it_runs_is_recorded_as_cancelled_even_if_it_ends_first(
    rq: Any,
) -> None:
    """The cancel comes while the handler runs and the handler returns before its
    worker's next lease renewal could read the flag (a 60 s lease: renewed 20 s on, far
    beyond this handler even on a loaded machine; at the default 10 s a starved run was
    renewed first and saw the flag): the
    ack finds the flag and the worker records the cancellation, as the SQL queue's ack
    checks it. Re-driven, the job runs again and succeeds."""
    r, queue = rq
    registry, said, ran = Registry(), [], []
    url = parse_url(entries.URL)

    @registry.job("t.self")
    def cancelled_from_inside(payload: Any, ctx: Any) -> None:
        ran.append(ctx.message_id)
        if len(ran) == 1:  # the operator's cancel, while this run holds the job
            said.append(asyncio.run(control.cancel(url, ctx.message_id)))
            said.append(ctx.cancelled)

    def work_here() -> WorkerStats:
        config = WorkerConfig(queues={queue: None}, sleep=0.2, stop_when_empty=True, lease=60)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(RedisWorker(url, registry, config).run).result()

    message_id = entries.add_job(r, queue, "t.self")
    stats = work_here()
    assert said == ["flagged", False]  # flagged; this run never read it
    assert (stats.cancelled, stats.succeeded) == (1, 0)
    assert [d["exception_class"] for d in entries.dead(r, queue)] == ["cancelled"]
    assert entries.left(r, queue) == 0 and not r.exists(names.cancel_key(queue))
    assert asyncio.run(control.retry(url, message_id)) == 1
    assert work_here().succeeded == 1 and ran == [message_id, message_id]


def test_bad_input_is_one_line_and_changes_no_key(rq: Any, tmp_path: Path) -> None:
    r, queue = rq
    entries.add_job(r, queue, "t.ok", SECRET)
    deliver(r, queue, 1)
    entries.add_job(r, queue, "t.ok", SECRET)
    delayed(r, queue, int(time.time() * 1000) + 60_000)
    before = snapshot(r, queue)
    unknown = str(uuid.uuid4())
    out = cli(tmp_path, "queue", "cancel", unknown)
    assert out.exit_code == 1
    assert out.output == f"error: no job with message id {unknown} in a queue on Redis\n"
    out = cli(tmp_path, "queue", "cancel", "not-a-uuid")
    assert out.exit_code == 2 and "not-a-uuid" in out.output
    other = entries.queue_name()
    out = cli(tmp_path, "queue", "jobs", "--queue", other)
    assert (out.exit_code, out.output) == (0, f"no jobs in queue {other} on Redis\n")
    assert list(r.scan_iter(match=names.tag(other).replace("{", "\\{") + "*")) == []
    assert snapshot(r, queue) == before
    # The streams deleted under it (a FLUSHDB, a DEL): an empty listing, nothing made.
    r.delete(*names.job_streams(queue), names.delayed_key(queue))
    assert cli(tmp_path, "queue", "jobs", "--queue", queue).output == (
        f"no jobs in queue {queue} on Redis\n"
    )
    assert cli(tmp_path, "queue", "cancel", unknown).exit_code == 1
    assert snapshot(r, queue) == {}


def test_pause_says_when_the_queue_has_no_keys_on_redis(rq: Any, tmp_path: Path) -> None:
    r, queue = rq
    out = cli(tmp_path, "queue", "pause", queue)
    assert out.output.startswith(f"paused queue {queue}; it has no keys on Redis now")
    assert r.exists(names.paused_key(queue))


def test_retry_of_a_foreign_dead_letter_by_id_says_it_cannot_run(
    rq: Any, tmp_path: Path
) -> None:
    r, queue = rq
    r.xadd(names.stream(queue), {"celery": "task"})  # not ours: parked on the dead stream
    work(queue)
    [parked] = entries.dead(r, queue)
    before = snapshot(r, queue)
    out = cli(tmp_path, "queue", "retry", parked["message_id"])
    assert out.exit_code == 1
    assert out.output == (
        f"error: dead letter {parked['message_id']} is an entry outbox did not write; it "
        "cannot run (`outbox queue forget` it)\n"
    )
    assert snapshot(r, queue) == before


def test_the_ready_gauge_counts_entries_no_worker_has_read_yet(rq: Any) -> None:
    """Before any worker made the stream's group, every entry is ready (a scrape racing
    the first worker's start read 0 here)."""
    from outbox.cli.broker_metrics import redis_pending
    from outbox.queue.redis.connect import parse_url

    r, queue = rq
    entries.add_jobs(r, queue, 3)
    assert redis_pending(parse_url(entries.URL))([queue]) == {queue: 3}
    deliver(r, queue, 1)
    assert redis_pending(parse_url(entries.URL))([queue]) == {queue: 2}
