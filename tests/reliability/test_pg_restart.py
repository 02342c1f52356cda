"""PostgreSQL restarted under load, on a private cluster (never the shared server):
producers see a clear error for the cut transaction and their retry succeeds; relays
reconnect by themselves and finish the work."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from outbox import Job, errors, record
from outbox.db.connection import Database
from outbox.errors import DatabaseError, NoActiveTransaction, OutboxError
from outbox.queue.worker import Worker, WorkerConfig
from tests.fixtures.databases import raw_connect
from tests.fixtures.fault_harness import (
    QUEUE,
    WORKER_READY,
    check_delivery,
    cli_argv,
    drained,
    fetch,
    finish,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.pg_cluster import PgCluster
from tests.fixtures.supervisor import Supervisor


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_record_reports_the_cut_transaction_and_the_retry_succeeds(
    pg_private: PgCluster, cluster_url: str, mode: str
) -> None:
    app = raw_connect(cluster_url)
    record(app, "cut:1", Job("notes.index", {"n": 1}))
    pg_private.restart(mode)

    with pytest.raises((DatabaseError, NoActiveTransaction)) as cut:
        record(app, "cut:2", Job("notes.index", {"n": 2}))
    assert "record" in str(cut.value) or "closed" in str(cut.value)
    app.close()

    retry = raw_connect(cluster_url)
    first = record(retry, "cut:1", Job("notes.index", {"n": 1}))
    second = record(retry, "cut:2", Job("notes.index", {"n": 2}))
    retry.commit()
    retry.close()
    rows = fetch(cluster_url, "SELECT message_id FROM outbox_messages ORDER BY id")
    assert rows == [(first,), (second,)]


@pytest.mark.slow
def test_relays_workers_and_producers_ride_out_a_server_restart(
    pg_private: PgCluster, cluster_url: str, tmp_path: Path
) -> None:
    relays = Supervisor(tmp_path)
    for i in range(2):
        relays.add(
            f"relay{i}",
            cli_argv(cluster_url, "relay", "--watch", "--poll-interval", "0.05"),
            ready="relay.watch",
        )
        relays.add(
            f"worker{i}",
            worker_argv(cluster_url, lease=2.0),
            ready=WORKER_READY,
            env={"HARNESS_URL": cluster_url},
        )
    producers = spawn_producers(cluster_url, 2, 150, pause=0.01)
    try:
        wait_until(
            lambda: fetch(cluster_url, "SELECT count(*) FROM harness_orders")[0][0] >= 60,
            120,
            "producers to get going",
        )
        # The restart is for running relays and workers: on a loaded machine one may still
        # be starting, and a process that cannot reach its database at start exits (its
        # schema check), as documented, for its supervisor to start again.
        relays.wait_ready()
        pg_private.restart("immediate")
        stats = []
        for proc in producers:
            code, out, err = finish(proc, 240)
            assert code == 0, err
            stats.append(json.loads(out.strip().splitlines()[-1]))
        wait_until(
            lambda: drained(cluster_url), 120, "relays and workers to drain after the restart"
        )
    finally:
        relays.wait_ready()
        results = relays.stop()

    for name, (code, err) in results.items():
        assert code == 0, (name, err[-2000:])
    assert all(s["leaked"] == {} for s in stats), stats
    assert (
        sum(sum(s["record_errors"].values()) + sum(s["other_errors"].values()) for s in stats) > 0
    ), "the restart cut no transaction; the test proved nothing"
    for s in stats:
        for name in s["record_errors"]:
            assert issubclass(getattr(errors, name), OutboxError)
    # Jobs a worker ran but could not acknowledge through the cut are run again.
    verdict = check_delivery(cluster_url, extra_allowed=2 * (2 + 2))
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 300


def test_an_idle_worker_survives_a_server_restart(
    pg_private: PgCluster, cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_URL", cluster_url)
    from tests.reliability.ledger_app import registry

    # Idle with a long claim sleep and a short lease: the reaper is the next to touch
    # the database after the restart.
    config = WorkerConfig(queues={QUEUE: None}, sleep=30.0, lease=1.0, listen=False, grace=1.0)
    worker = Worker(Database(cluster_url), registry, config)
    crashed: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            crashed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(1.0)  # let it start, claim nothing and reap once on a live connection
    pg_private.restart("fast")
    thread.join(timeout=3.0)  # several reaper periods
    alive = thread.is_alive()
    worker.stop_now()
    thread.join(timeout=30)
    assert alive and crashed == [], [type(e).__name__ for e in crashed]
