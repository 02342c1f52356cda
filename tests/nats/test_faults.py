"""Faults with JetStream in the path, real processes and real servers, checked against the
ledger: relays SIGKILLed at random, a single server restarted mid-run, and a three-node
cluster losing one node and then the stream's leader.

Truth lives outside the processes: ``harness_orders`` (committed intents, written in the
producer's transaction), the stream's contents (read by sequence, never consumed) and a
ledger file of executions (``tests/nats/app.py``). Counts are kept small: the kills, not
the volume, are what these tests are about (``OUTBOX_SOAK=1`` runs longer).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from outbox.jetstream import names
from tests.fixtures.fault_harness import (
    QUEUE,
    cli_argv,
    fetch,
    finish,
    kill_relays_while_producing,
    pending_count,
    relay_argv,
    spawn_producers,
    wait_until,
)
from tests.fixtures.supervisor import Supervisor
from tests.nats import support
from tests.nats.servers import NatsCluster, NatsServer, run
from tests.reliability import rows

SOAK = os.environ.get("OUTBOX_SOAK", "") not in ("", "0")
PER_PRODUCER = 600 if SOAK else 80
ENV = {"HARNESS_JOB": "t.ok"}


def _fresh(url: str) -> None:
    """Delete the harness queue's streams: each test starts from empty ones."""

    async def drop(js: Any) -> None:
        for stream in (names.stream(QUEUE), names.dead_stream(QUEUE)):
            with contextlib.suppress(Exception):
                await js.delete_stream(stream)

    run(url, drop)


def _relay(url: str, target: str, *extra: str) -> list[str]:
    return [*relay_argv(url, batch_size=7, poll_interval=0.02), "--target", target, *extra]


def _committed(url: str) -> set[str]:
    return {r[0] for r in fetch(url, "SELECT message_id FROM harness_orders")}


def _assert_exactly_once_in_stream(url: str, nats_url: str) -> int:
    committed = _committed(url)
    in_stream = support.stream_ids(nats_url, names.stream(QUEUE))
    assert committed and set(in_stream) == committed, (
        f"lost {len(committed - set(in_stream))}, never committed {len(set(in_stream) - committed)}"
    )
    doubles = [m for m, n in in_stream.items() if n > 1]
    assert not doubles, f"{len(doubles)} intents in the stream twice, e.g. {doubles[:3]}"
    assert pending_count(url) == 0
    return len(committed)


def _produce(url: str, producers: int) -> None:
    for proc in spawn_producers(url, producers, PER_PRODUCER, pause=0.004, env=ENV):
        code, _, err = finish(proc, 240)
        assert code == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"], indirect=True)
def test_relays_killed_at_random_put_every_intent_into_the_stream_exactly_once(
    backend: str, ledger_url: str, nats_url: str, tmp_path: Path
) -> None:
    """Each relay keeps 3 batches in flight where row locks allow (SQLite: 1), so kills
    land between the batches of one relay too."""
    _fresh(nats_url)
    argv = _relay(ledger_url, nats_url, "--in-flight", "3")
    relays = kill_relays_while_producing(
        ledger_url, [argv] * 3, tmp_path, seed=12, per_producer=PER_PRODUCER, pause=0.004,
        nap=(0.05, 0.3), env=ENV,
    )
    n = _assert_exactly_once_in_stream(ledger_url, nats_url)
    lanes = 1 if backend == "sqlite" else 3
    _report(f"SIGKILL relays → JetStream, {lanes} in flight", backend, n, relays.kills)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_single_server_restarted_mid_run_loses_nothing(ledger_url: str, tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "own")
    (tmp_path / "own").mkdir()
    server.start()
    relays = Supervisor(tmp_path)
    try:
        relays.add("relay", _relay(ledger_url, server.url), ready="relay.watch")
        producers = spawn_producers(ledger_url, 1, PER_PRODUCER, pause=0.01, env=ENV)
        time.sleep(0.4)
        server.restart()  # mid-run: the relay's batches fail, back off, and resume
        for proc in producers:
            code, _, err = finish(proc, 240)
            assert code == 0, err
        wait_until(lambda: pending_count(ledger_url) == 0, 120, "the relay to drain")
        n = _assert_exactly_once_in_stream(ledger_url, server.url)
    finally:
        relays.wait_ready()
        results = relays.stop()
        server.stop()
    assert results["relay"][0] == 0, results["relay"][1][-2000:]
    _report("nats-server restart", "sqlite", n, 1)


def _leader(cluster: NatsCluster) -> str:
    async def ask(js: Any) -> str:
        info = await js.stream_info(names.stream(QUEUE))
        return str(info.cluster.leader)

    return run(cluster.url, ask)


def _executions(ledger: Path) -> Counter[str]:
    return Counter(
        line.split()[0] for line in ledger.read_text().splitlines() if line.endswith(" ran")
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_three_node_cluster_loses_a_node_then_the_leader_and_no_job(
    ledger_url: str, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    _fresh(nats_cluster.url)
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    env = {"NATS_TEST_LEDGER": str(ledger)}
    fleet = Supervisor(tmp_path)
    fleet.add("relay", _relay(ledger_url, nats_cluster.url, "--replicas", "3"), ready="relay.watch")
    worker = [
        *cli_argv(ledger_url, "--log-level", "info"),
        "worker",
        QUEUE,
        "--app",
        "tests.nats.app:registry",
        "--broker",
        nats_cluster.url,
        "--lease",
        "2",
        "--concurrency",
        "2",
        "--prefetch",
        "2",
    ]
    for i in range(2):
        fleet.add(f"worker{i}", worker, ready="worker.started", env=env)
    producers = spawn_producers(ledger_url, 2, PER_PRODUCER, pause=0.01, env=ENV)
    kills = []
    try:
        wait_until(lambda: bool(_executions(ledger)), 60, "the first job to run")
        leader = _leader(nats_cluster)
        follower = next(n for n in nats_cluster.nodes if n.name != leader)
        follower.kill()
        kills.append(f"follower {follower.name}")
        time.sleep(1.0)
        follower.start()
        leader = _leader(nats_cluster)
        nats_cluster.node_named(leader).kill()
        kills.append(f"stream leader {leader}")
        time.sleep(1.0)
        nats_cluster.node_named(leader).start()
        for proc in producers:
            code, _, err = finish(proc, 240)
            assert code == 0, err
        committed = _committed(ledger_url)
        wait_until(lambda: pending_count(ledger_url) == 0, 120, "the relay to drain")
        wait_until(lambda: set(_executions(ledger)) >= committed, 120, "every job to run")
    finally:
        fleet.stop()
        for node in nats_cluster.nodes:  # leave the session's cluster whole
            if node.proc is None or node.proc.poll() is not None:
                node.start()
    runs = _executions(ledger)
    assert set(runs) == committed  # 0 lost, nothing that never committed
    extra = sum(n - 1 for n in runs.values())
    # A node kill can lose acknowledgements in flight: at most what the two workers held
    # (concurrency 2 + prefetch 2 each) per kill.
    assert extra <= 2 * 4 * len(kills), f"{extra} extra executions for {kills}"
    _report(
        "3-node cluster: " + ", then ".join(kills) + " killed",
        "sqlite",
        len(committed),
        len(kills),
        (extra, 2 * 4 * len(kills)),
    )


def _report(
    what: str, backend: str, committed: int, kills: int, runs: tuple[int, int] | None = None
) -> None:
    """The scenario's row of the reliability report (``tests.reliability.rows``). Every
    check above has passed: nothing lost, nothing in the stream twice. ``runs``: extra
    executions and what the kills explain, where the workers drain the stream."""
    rows.report(
        rows.Row(
            fault=f"{what} ({kills}x)",
            backend=backend,
            traffic="producers of 10% rolled-back transactions; relays `--target nats://`"
            + ("; 2 workers `--broker` (c2, p2, lease 2 s)" if runs else ""),
            jobs=committed,
            faults=kills,
            lost=0,
            double_handoffs=0,
            extra_executions=runs[0] if runs else None,
            extra_bound=runs[1] if runs else None,
        )
    )
