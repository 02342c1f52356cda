"""Queue control on JetStream (``outbox.jetstream.control``) with real worker processes
and a real nats-server: ``queue pause/resume --broker`` reaching every worker of the
queue, a worker started on a paused queue taking nothing; ``queue jobs --broker``
without payloads; ``queue cancel --broker`` of a waiting job (dead-lettered, never runs,
runs again once re-driven) and of a running one (sync: ctx.cancelled; async: cancelled)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from outbox.cli import main
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.jetstream import names
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import cli_argv
from tests.fixtures.processes import wait_until
from tests.fixtures.supervisor import Supervisor
from tests.nats import support
from tests.nats.servers import run


@pytest.fixture
def db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    database = Database(url)
    with database.connect() as c:
        migrate(c)
    return database, url


def _cli(db_url: str, *args: str) -> Any:
    return CliRunner().invoke(main, ["--database-url", db_url, *args])


def _hand_off(db: tuple[Database, str], nats_url: str, queue: str, n: int, prefix: str) -> None:
    support.record_jobs(db[1], queue, n, prefix=prefix)
    with support.relay(db[0], nats_url) as relay:
        relay.run()


def _delivered(nats_url: str, queue: str) -> int:
    """Deliveries the queue's consumer has made (0 before any worker fetched)."""

    async def ask(js: Any) -> int:
        info = await js.consumer_info(names.stream(queue), names.CONSUMER)
        return int(info.delivered.stream_seq)

    return run(nats_url, ask)


def _runs(ledger: Path) -> Counter[str]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return Counter(p[0] for p in lines if p[3] == "ran")


def test_pause_and_resume_reach_every_worker_and_a_paused_start_takes_nothing(
    db: tuple[Database, str], nats_url: str, tmp_path: Path
) -> None:
    queue = support.queue_name("ctl")
    paused = _cli(db[1], "queue", "pause", queue, "--broker", nats_url)
    assert paused.exit_code == 0 and paused.stdout.strip() == f"paused queue {queue}"
    again = _cli(db[1], "queue", "pause", queue, "--broker", nats_url)
    assert again.stdout.strip() == f"queue {queue} was paused already"
    _hand_off(db, nats_url, queue, 4, "a")
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    argv = cli_argv(
        db[1], "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url,
        "--sleep", "0.2",
    )
    fleet = Supervisor(tmp_path)
    for i in range(2):
        fleet.add(f"w{i}", argv, ready="worker.started", env={"NATS_TEST_LEDGER": str(ledger)})
    try:
        fleet.wait_ready()
        time.sleep(0.5)  # room for a worker that ignored the pause to fetch (it must not)
        assert _delivered(nats_url, queue) == 0 and not _runs(ledger)

        resumed = _cli(db[1], "queue", "resume", queue, "--broker", nats_url)
        assert resumed.exit_code == 0 and resumed.stdout.strip() == f"resumed queue {queue}"
        wait_until(lambda: len(_runs(ledger)) == 4, 30, "the 4 jobs to run after resume")

        assert _cli(db[1], "queue", "pause", queue, "--broker", nats_url).exit_code == 0
        wait_until(
            lambda: all("worker.queue_paused" in m.output() for m in fleet.members.values()),
            30,
            "both workers to hear the pause",
        )
        # A pull request open at the pause may still deliver until it expires (--sleep,
        # 0.2 s here); none is sent after it.
        time.sleep(0.5)
        before = _delivered(nats_url, queue)
        _hand_off(db, nats_url, queue, 3, "b")
        time.sleep(0.5)
        assert _delivered(nats_url, queue) == before and len(_runs(ledger)) == 4

        assert _cli(db[1], "queue", "resume", queue, "--broker", nats_url).exit_code == 0
        wait_until(lambda: len(_runs(ledger)) == 7, 30, "the 3 later jobs to run")
    finally:
        results = fleet.stop()
    assert all(code == 0 for code, _ in results.values()), results
    assert set(_runs(ledger).values()) == {1}
    not_paused = _cli(db[1], "queue", "resume", queue, "--broker", nats_url)
    assert not_paused.stdout.strip() == f"queue {queue} was not paused"


def test_a_stop_when_empty_worker_on_a_paused_queue_runs_nothing_and_exits(
    db: tuple[Database, str], nats_url: str, tmp_path: Path
) -> None:
    queue = support.queue_name("ctl")
    _hand_off(db, nats_url, queue, 2, "a")
    assert _cli(db[1], "queue", "pause", queue, "--broker", nats_url).exit_code == 0
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    argv = cli_argv(
        db[1], "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url,
        "--stop-when-empty",
    )
    fleet = Supervisor(tmp_path)
    fleet.add("w", argv, env={"NATS_TEST_LEDGER": str(ledger)})
    results = fleet.wait(60)
    assert results["w"][0] == 0, results
    assert not _runs(ledger) and support.stream_count(nats_url, names.stream(queue)) == 2
    assert _cli(db[1], "queue", "resume", queue, "--broker", nats_url).exit_code == 0


def _steps(ledger: Path, message_id: str) -> list[str]:
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return [p[3] for p in lines if p[0] == message_id]


def _dead(db_url: str, nats_url: str) -> str:
    return str(_cli(db_url, "queue", "failed", "--broker", nats_url, "500").stdout)


def test_jobs_lists_waiting_jobs_without_payloads_and_cancel_dead_letters_a_waiting_one(
    db: tuple[Database, str], nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = support.queue_name("cancel")
    ids = support.record_jobs(db[1], queue, 2, payload={"secret": "payload-marker"})
    with support.relay(db[0], nats_url) as relay:
        relay.run()
    listed = _cli(db[1], "queue", "jobs", "--broker", nats_url, "--queue", queue)
    assert listed.exit_code == 0 and "payload-marker" not in listed.stdout
    rows = [line.split() for line in listed.stdout.splitlines() if line.startswith(ids[0][:8])]
    assert {r[0] for r in rows} == set(ids) and {r[3] for r in rows} == {"ready"}

    unknown = _cli(db[1], "queue", "cancel", "--broker", nats_url, str(uuid.uuid4()))
    assert unknown.exit_code == 1 and "no job with message id" in unknown.stderr
    assert support.stream_count(nats_url, names.stream(queue)) == 2  # unchanged

    done = _cli(db[1], "queue", "cancel", "--broker", nats_url, ids[0])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"cancelled {ids[0]} (moved to the dead letters)"
    assert support.stream_count(nats_url, names.stream(queue)) == 1
    [line] = [ln for ln in _dead(db[1], nats_url).splitlines() if ids[0] in ln]
    assert "cancelled" in line

    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    monkeypatch.setenv("NATS_TEST_LEDGER", str(ledger))
    worker = cli_argv(
        db[1], "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url,
        "--stop-when-empty",
    )
    fleet = Supervisor(tmp_path)
    fleet.add("w", worker, env={"NATS_TEST_LEDGER": str(ledger)})
    assert fleet.wait(60)["w"][0] == 0
    assert _runs(ledger) == Counter({ids[1]: 1})

    # re-driven, the cancelled job runs: the mark went with the re-drive
    assert _cli(db[1], "queue", "retry", "--broker", nats_url, ids[0]).exit_code == 0
    fleet.add("w2", worker, env={"NATS_TEST_LEDGER": str(ledger)})
    assert fleet.wait(60)["w2"][0] == 0
    assert _runs(ledger) == Counter({ids[0]: 1, ids[1]: 1})


@pytest.mark.parametrize("job", ["t.watch", "t.aslow"])
def test_cancel_of_a_running_job_flags_it_and_it_is_dead_lettered_as_cancelled(
    job: str, db: tuple[Database, str], nats_url: str, tmp_path: Path
) -> None:
    """A sync handler sees ctx.cancelled; an async one is cancelled."""
    queue = support.queue_name("cancel")
    [message_id] = support.record_jobs(db[1], queue, 1, job=job, payload={"s": 60})
    with support.relay(db[0], nats_url) as relay:
        relay.run()
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    worker = cli_argv(
        db[1], "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url,
        "--stop-when-empty",
    )
    fleet = Supervisor(tmp_path)
    fleet.add("w", worker, env={"NATS_TEST_LEDGER": str(ledger)})
    try:
        wait_until(lambda: "start" in _steps(ledger, message_id), 30, "the job to start")
        flagged = _cli(db[1], "queue", "cancel", "--broker", nats_url, message_id)
        assert flagged.exit_code == 0, flagged.output
        assert "a worker has it; it will be recorded as cancelled" in flagged.stdout
        results = fleet.wait(60)
    finally:
        fleet.stop()
    assert results["w"][0] == 0, results
    expected = ["start", "saw-cancel"] if job == "t.watch" else ["start"]
    assert _steps(ledger, message_id) == expected
    [line] = [ln for ln in _dead(db[1], nats_url).splitlines() if message_id in ln]
    assert "cancelled" in line
    assert support.stream_count(nats_url, names.stream(queue)) == 0
