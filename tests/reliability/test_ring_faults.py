"""The ring storage (``OUTBOX_QUEUE_STORAGE=ring``) under faults: a rotation terminated
or cut by a server restart rolls back whole and the next pass completes it; a rotation
never removes a held job or breaks its fence; a reader holding a slot (``pg_dump``)
makes rotation skip, never stall; and workers SIGKILLed at random while a rotator
rotates as fast as it can (and is terminated now and then) lose nothing and run
nothing twice beyond what a lease expiry allows."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox import Job
from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import push
from tests.fixtures.fault_harness import (
    WORKER_READY,
    check_delivery,
    fetch,
    kill_at_random_until_produced,
    relay_argv,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.pg_cluster import PgCluster
from tests.fixtures.queue_ops import ack, claim, heartbeat, release
from tests.fixtures.supervisor import Supervisor

ROTATE = "SELECT outbox_ring_rotate(0, 0, 5000, %s)"


def _ring(url: str) -> None:
    was = settings.queue_storage
    settings.queue_storage = "ring"
    try:
        with Database(url).connect() as conn:
            migrate(conn)
    finally:
        settings.queue_storage = was


@pytest.fixture
def ring_url(backend: str, ledger_url: str) -> str:
    """The harness's database (``ledger_url``) with its queue in the ring."""
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    _ring(ledger_url)
    return ledger_url


def _state(url: str) -> tuple[Any, ...]:
    """The ring's row, and every job with the slot table that holds it."""
    ring = fetch(url, "SELECT slot, rotations FROM outbox_queue_ring")[0]
    rows = fetch(url, "SELECT id, message_id, attempts, reserved_by, lease_expires_at,"
                      " tableoid::regclass::text FROM outbox_jobs ORDER BY id")
    return ring, rows


def _without_slot(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [r[:-1] for r in rows]


def _slot_tables(url: str) -> list[str]:
    return [str(r[0]) for r in fetch(
        url, "SELECT relname FROM pg_class WHERE relname ~ '^outbox_jobs_ring_[0-9]+$'"
             " AND relkind = 'r' ORDER BY relname")]


def _push(url: str, n: int, queue: str = "harness") -> None:
    with psycopg.connect(url) as app:
        for i in range(n):
            push(app, Job("harness.exec", {"n": i}, queue=queue))
            app.commit()


@pytest.fixture
def blocker(ring_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that has written to outbox_jobs (ROW EXCLUSIVE): rotation waits."""
    conn = psycopg.connect(ring_url)
    conn.execute("DELETE FROM outbox_jobs WHERE false")
    yield conn
    conn.close()


def _rotate_in_thread(url: str, timeout: str) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    conn = psycopg.connect(url, autocommit=True)
    out["pid"] = conn.info.backend_pid

    def run() -> None:
        try:
            out["answer"] = conn.execute(ROTATE, (timeout,)).fetchone()
        except psycopg.Error as exc:
            out["error"] = exc
        finally:
            conn.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _waits_on_a_lock(url: str, pid: int) -> bool:
    return bool(fetch(url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                           " AND wait_event_type = 'Lock'", (pid,))[0][0])


def test_a_terminated_rotation_rolls_back_and_the_next_pass_completes(
    ring_url: str, blocker: psycopg.Connection[Any]
) -> None:
    _push(ring_url, 5)
    before = _state(ring_url)
    t, out = _rotate_in_thread(ring_url, "30s")
    wait_until(lambda: _waits_on_a_lock(ring_url, out["pid"]), 10, "the rotation to wait")
    fetch(ring_url, "SELECT pg_terminate_backend(%s)", (out["pid"],))
    t.join(10)
    assert isinstance(out.get("error"), psycopg.Error)
    assert _state(ring_url) == before  # nothing moved, the ring unchanged
    assert _slot_tables(ring_url) == ["outbox_jobs_ring_0"]  # the next slot rolled back too
    blocker.rollback()
    assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]
    (slot, rotations), rows = _state(ring_url)
    assert (slot, rotations) == (before[0][0] + 1, before[0][1] + 1)
    assert _without_slot(rows) == _without_slot(before[1])
    assert {r[-1] for r in rows} == {f"outbox_jobs_ring_{slot}"}


def test_a_rotation_cut_by_a_server_restart_rolls_back(
    backend: str, pg_private: PgCluster, cluster_url: str
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    _ring(cluster_url)
    _push(cluster_url, 5)
    before = _state(cluster_url)
    block = psycopg.connect(cluster_url)
    block.execute("DELETE FROM outbox_jobs WHERE false")
    try:
        t, out = _rotate_in_thread(cluster_url, "30s")
        wait_until(lambda: _waits_on_a_lock(cluster_url, out["pid"]), 10, "the rotation to wait")
        pg_private.restart("immediate")
        t.join(10)
    finally:
        block.close()
    assert "answer" not in out
    assert _state(cluster_url) == before
    assert fetch(cluster_url, ROTATE, ("1s",)) == [("rotated",)]
    assert _without_slot(_state(cluster_url)[1]) == _without_slot(before[1])


def test_rotation_keeps_held_jobs_and_their_fences(ring_url: str) -> None:
    _push(ring_url, 4)
    with Database(ring_url).connect() as conn:
        held = claim(conn, "harness", 3, "w1", 60_000)
        assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]
        assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]  # and once more
        assert heartbeat(conn, "w1", held, 60_000) == 3
        assert release(conn, "w1", held[2], 0, "RuntimeError")
        assert ack(conn, "w1", held[:2]) == {held[0].id, held[1].id}
        again = claim(conn, "harness", 5, "w2", 60_000)
    assert sorted(j.id for j in again) == sorted([held[2].id, *[
        r[0] for r in fetch(ring_url, "SELECT id FROM outbox_jobs WHERE attempts = 1"
                                      " AND reserved_by = 'w2' AND id <> %s", (held[2].id,))]])
    assert len(again) == 2
    # the second pass dropped the slot the first left; the slot it left waits for the next
    assert _slot_tables(ring_url) == ["outbox_jobs_ring_1", "outbox_jobs_ring_2"]
    assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]
    assert _slot_tables(ring_url) == ["outbox_jobs_ring_2", "outbox_jobs_ring_3"]


def test_a_reader_holding_the_slot_makes_rotation_skip_not_stall(ring_url: str) -> None:
    _push(ring_url, 3)
    reader = psycopg.connect(ring_url)  # pg_dump's way: ACCESS SHARE until it ends
    reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    reader.execute("SELECT count(*) FROM outbox_jobs").fetchone()
    started = time.monotonic()
    assert fetch(ring_url, ROTATE, ("50ms",)) == [("locked",)]
    assert time.monotonic() - started < 2
    with Database(ring_url).connect() as conn:
        assert len(claim(conn, "harness", 5, "w", 60_000)) == 3  # the claim goes on
    reader.close()
    assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]


def test_a_reader_of_a_left_slot_delays_its_drop_not_the_rotation(ring_url: str) -> None:
    _push(ring_url, 3)
    assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]
    reader = psycopg.connect(ring_url)  # holds ACCESS SHARE on the slot left
    reader.execute("SELECT count(*) FROM outbox_jobs_ring_0").fetchone()
    assert fetch(ring_url, ROTATE, ("50ms",)) == [("rotated",)]
    assert _slot_tables(ring_url) == ["outbox_jobs_ring_0", "outbox_jobs_ring_1",
                                      "outbox_jobs_ring_2"]
    reader.close()
    assert fetch(ring_url, ROTATE, ("1s",)) == [("rotated",)]
    assert _slot_tables(ring_url) == ["outbox_jobs_ring_2", "outbox_jobs_ring_3"]
    assert fetch(ring_url, "SELECT count(*) FROM outbox_jobs") == [(3,)]


class _Rotator(threading.Thread):
    """Rotates as fast as it can; every few passes its session is terminated mid-call."""

    def __init__(self, url: str, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.rng = url, rng
        self.stop = threading.Event()
        self.rotated = self.terminated = 0

    def run(self) -> None:
        while not self.stop.is_set():
            conn = psycopg.connect(self.url, autocommit=True)
            try:
                while not self.stop.is_set():
                    if self.rng.random() < 0.1:
                        killer = threading.Timer(0.001, self._terminate, (conn.info.backend_pid,))
                        killer.start()
                    answer = conn.execute(ROTATE, ("50ms",)).fetchone()
                    self.rotated += answer == ("rotated",)
                    time.sleep(0.02)
            except psycopg.Error:
                self.terminated += 1
            finally:
                conn.close()

    def _terminate(self, pid: int) -> None:
        fetch(self.url, "SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.slow
def test_workers_killed_while_the_ring_rotates_lose_nothing(
    ring_url: str, tmp_path: Path
) -> None:
    rng = random.Random(39)
    env = {"HARNESS_URL": ring_url, "HARNESS_JOB": "harness.exec"}
    crew = Supervisor(tmp_path)
    crew.add("relay", relay_argv(ring_url, batch_size=10, poll_interval=0.05),
             ready="relay.watch")
    for i in range(3):
        crew.add(f"worker{i}", worker_argv(ring_url, concurrency=2, lease=1.0),
                 ready=WORKER_READY, env=env)
    rotator = _Rotator(ring_url, rng)
    rotator.start()
    producers = spawn_producers(ring_url, 2, 80, pause=0.01, env=env)
    try:
        kill_at_random_until_produced(crew, producers, rng)
        wait_until(lambda: not fetch(ring_url, "SELECT count(*) FROM outbox_jobs")[0][0]
                   and not fetch(ring_url, "SELECT count(*) FROM outbox_messages")[0][0],
                   180, "the crew to drain the queue")
    finally:
        rotator.stop.set()
        rotator.join(10)
        crew.wait_ready()
        results = crew.stop()
    for name, (code, out) in results.items():
        assert code == 0, (name, out[-3000:])
    assert rotator.rotated > 5 and rotator.terminated > 0
    kills = sum(m.kills for n, m in crew.members.items() if n.startswith("worker"))
    verdict = check_delivery(ring_url, extra_allowed=kills * (2 + 2))
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 160


def test_a_worker_rotates_the_ring_between_its_claims_and_new_jobs_follow_the_slot(
    ring_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers are the ring's ticker (``RingTicker``, a thread started after the first
    claim round): one worker alone rotates it; every job runs once; a job pushed after
    the rotations lands in the current slot, through a statement its connection
    prepared before them too (each rotation detaches and attaches a slot, and so
    invalidates cached plans)."""
    from outbox import Registry
    from outbox.db import ring
    from outbox.queue import Worker, WorkerConfig

    monkeypatch.setattr(ring, "EVERY_MS", 0)
    monkeypatch.setattr(ring, "MIN_DEAD", 0)
    monkeypatch.setattr(ring, "CHECK_EVERY_S", 0.01)
    ran: list[int] = []
    registry = Registry()
    (_, rotations_before), _ = _state(ring_url)

    @registry.job("ring.tick")
    def tick(body: dict[str, int], ctx: object) -> None:
        if body["n"] == 15:  # half way, the ticker has rotated at least once
            wait_until(lambda: _state(ring_url)[0][1] > rotations_before, 20, "a rotation")
        ran.append(body["n"])

    app = psycopg.connect(ring_url)
    for i in range(30):  # prepared by psycopg after its fifth run
        push(app, Job("ring.tick", {"n": i}, queue="ticks"))
        app.commit()
    with Worker(Database(ring_url), registry,
                WorkerConfig(queues={"ticks": None}, stop_when_empty=True, sleep=0.01,
                             prefetch=1, concurrency=1)) as worker:
        worker.run()
    assert sorted(ran) == list(range(30))
    (slot, rotations), _ = _state(ring_url)
    assert rotations > rotations_before
    push(app, Job("ring.tick", {"n": 30}, queue="ticks"))
    app.commit()
    app.close()
    assert fetch(ring_url, "SELECT tableoid::regclass::text FROM outbox_jobs") == [
        (f"outbox_jobs_ring_{slot}",)]


def test_a_ticker_whose_session_is_terminated_reconnects_and_rotates_on(
    ring_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pg_terminate_backend`` of the worker's rotating session: the pass fails (logged
    by class), the ticker drops the connection, opens another and the ring rotates on."""
    from outbox.db import ring
    from outbox.queue.upkeep import RingTicker

    monkeypatch.setattr(ring, "EVERY_MS", 0)
    monkeypatch.setattr(ring, "MIN_DEAD", 0)
    monkeypatch.setattr(ring, "CHECK_EVERY_S", 0.05)
    _push(ring_url, 3)

    def rotations() -> int:
        return int(_state(ring_url)[0][1])

    ticker = RingTicker(Database(ring_url))
    try:
        start = rotations()
        wait_until(lambda: rotations() >= start + 2, 20, "the ticker to rotate")
        rotating = ("SELECT pid FROM pg_stat_activity WHERE strpos(query, 'outbox_ring_rotate(')"
                    " > 0 AND pid <> pg_backend_pid() AND datname = current_database()")
        pids = [p for (p,) in fetch(ring_url, rotating)]
        assert len(pids) == 1
        fetch(ring_url, "SELECT pg_terminate_backend(%s)", (pids[0],))
        after = rotations()
        wait_until(lambda: rotations() >= after + 2, 30, "rotation after the terminate")
        assert [p for (p,) in fetch(ring_url, rotating)] != pids  # a new session
    finally:
        ticker.close()
    assert fetch(ring_url, "SELECT count(*) FROM outbox_jobs") == [(3,)]
