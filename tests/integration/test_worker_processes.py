"""Real worker processes racing on real rows: drain, SIGKILL, SIGTERM, SIGSTOP fencing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from outbox import Job
from outbox.db.connection import Connection
from outbox.queue import push
from tests.fixtures.workers import (
    ROOT,
    count,
    runlog_lines,
    runs,
    seed_jobs,
    wait_until,
    worker_cmd,
)

TIMEOUT = 120


class WorkerProc:
    """A worker process whose stderr (JSON log lines) goes to a file we can poll."""

    def __init__(self, url: str, tmp: Path, name: str, *args: str) -> None:
        self.log_path = tmp / f"{name}.stderr"
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115
        env = {**os.environ, "OUTBOX_TEST_RUNLOG": str(tmp / "runs"), "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            worker_cmd(url, *args), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self._log
        )

    def events(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def has_event(self, name: str) -> bool:
        return any(e.get("event") == name for e in self.events())

    def worker_id(self) -> str:
        wait_until(lambda: self.has_event("worker.started"), TIMEOUT)
        return str(next(e["worker_id"] for e in self.events() if e["event"] == "worker.started"))

    def wait(self) -> int:
        try:
            return self.proc.wait(TIMEOUT)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        self._log.close()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Any:
    (tmp_path / "runs").mkdir()
    started: list[WorkerProc] = []

    def start(name: str, *args: str) -> WorkerProc:
        w = WorkerProc(db_url, tmp_path, name, *args)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGCONT)
            w.kill()


def _runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.mark.parametrize("n_workers", [2, 4])
def test_workers_drain_10000_jobs_each_exactly_once(
    conn: Connection, workers: Any, tmp_path: Path, n_workers: int
) -> None:
    seed_jobs(conn, 10_000, job_name="t.log")
    expected = {r[0] for r in conn.execute_sql("SELECT message_id FROM outbox_jobs")}
    procs = [
        workers(f"w{i}", "--stop-when-empty", "--concurrency", "4", "--prefetch", "50")
        for i in range(n_workers)
    ]
    assert [p.wait() for p in procs] == [0] * n_workers
    seen = runs(_runs_dir(tmp_path))
    assert set(seen) == expected
    assert max(seen.values()) == 1
    assert count(conn, "outbox_jobs") == 0
    assert count(conn, "outbox_failed_jobs") == 0


def _slow(app_conn: Any, **payload: float) -> str:
    mid = push(app_conn, Job("t.slow", payload))
    app_conn.commit()
    return mid


def _started_by(tmp_path: Path, message_id: str, attempt: int) -> bool:
    return any(
        line.split()[1:] == [message_id, str(attempt), "start"]
        for line in runlog_lines(_runs_dir(tmp_path))
    )


def test_job_of_a_killed_worker_runs_again_elsewhere_after_its_lease(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    mid = _slow(app_conn, s=60, s_retry=0)
    doomed = workers("doomed", "--lease", "1")
    wait_until(lambda: _started_by(tmp_path, mid, 1), TIMEOUT)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.kill()
    rescuer = workers("rescuer", "--lease", "1", "--max-jobs", "1")
    assert rescuer.wait() == 0
    lines = [line.split() for line in runlog_lines(_runs_dir(tmp_path))]
    assert [line[1:] for line in lines if line[0] == str(rescuer.proc.pid)] == [
        [mid, "2", "start"],
        [mid, "2", "end"],
    ]
    assert count(conn, "outbox_jobs") == 0
    assert count(conn, "outbox_failed_jobs") == 0


def test_sigterm_lets_the_running_job_finish_and_returns_prefetched_jobs(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    slow = _slow(app_conn, s=1.5)
    for i in range(4):
        push(app_conn, Job("t.log", {"i": i}))
    app_conn.commit()
    worker = workers("w", "--concurrency", "1", "--prefetch", "5", "--grace", "60")
    wait_until(lambda: _started_by(tmp_path, slow, 1), TIMEOUT)
    assert count(conn, "outbox_jobs", "reserved_by IS NOT NULL") == 5
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert any(e.get("outcome") == "stopped gracefully" for e in worker.events())
    ends = [line.split()[1:] for line in runlog_lines(_runs_dir(tmp_path))]
    assert [slow, "1", "end"] in ends
    assert runs(_runs_dir(tmp_path)) == {}
    left = conn.execute_sql("SELECT job_name, attempts, reserved_by FROM outbox_jobs")
    assert sorted(tuple(r) for r in left) == [("t.log", 0, None)] * 4


@pytest.mark.slow
def test_worker_paused_past_its_lease_cannot_ack_the_job_it_lost(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    mid = _slow(app_conn, s=1.5, s_retry=3)
    paused = workers("paused", "--lease", "1")
    paused_id = paused.worker_id()
    wait_until(lambda: _started_by(tmp_path, mid, 1), TIMEOUT)
    paused.proc.send_signal(signal.SIGSTOP)
    taker = workers("taker", "--lease", "2", "--max-jobs", "1")
    wait_until(lambda: _started_by(tmp_path, mid, 2), TIMEOUT)
    taker_id = taker.worker_id()
    paused.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: paused.has_event("job.lease_lost"), TIMEOUT)
    row = conn.execute_sql(
        f"SELECT attempts, reserved_by FROM outbox_jobs WHERE message_id = '{mid}'"
    )
    assert tuple(row[0]) == (2, taker_id)
    assert taker_id != paused_id
    assert taker.wait() == 0
    paused.proc.send_signal(signal.SIGTERM)
    assert paused.wait() == 0
    assert count(conn, "outbox_jobs") == 0
    assert count(conn, "outbox_failed_jobs") == 0
    lost = [e for e in paused.events() if e["event"] == "job.lease_lost"]
    assert [e["message_id"] for e in lost] == [mid]


def test_a_job_running_past_the_grace_goes_back_at_once_its_attempt_counted(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    """Issue 38: the worker exited 1 and left the job reserved until its lease (here 60 s)
    expired. Now it gives the job back as it goes; a second worker takes it at once."""
    mid = _slow(app_conn, s=60, s_retry=0)
    stopped = workers("stopped", "--grace", "0.5", "--lease", "60")
    stopped_id = stopped.worker_id()
    wait_until(lambda: _started_by(tmp_path, mid, 1), TIMEOUT)
    stopped.proc.send_signal(signal.SIGTERM)
    assert stopped.wait() == 1  # not graceful: a job was cut short (the exit-codes page)
    events = stopped.events()
    assert any(e.get("outcome") == "stopped with jobs unfinished" for e in events)
    (retry,) = [e for e in events if e["event"] == "job.retry"]
    assert (retry["message_id"], retry["attempt"], retry["error"]) == (mid, 1, "WorkerStopped")
    row = conn.execute_sql(
        f"SELECT attempts, reserved_by, last_error FROM outbox_jobs WHERE message_id = '{mid}'"
    )
    assert tuple(row[0]) == (1, None, "WorkerStopped")  # free now, not in 60 s
    assert stopped_id not in str(row)
    taker = workers("taker", "--lease", "60", "--max-jobs", "1")
    assert taker.wait() == 0  # took it at once: its lease would have held it for 60 s
    lines = [line.split() for line in runlog_lines(_runs_dir(tmp_path))]
    assert [line[1:] for line in lines if line[0] == str(taker.proc.pid)] == [
        [mid, "2", "start"],
        [mid, "2", "end"],
    ]
    assert count(conn, "outbox_jobs") == 0 and count(conn, "outbox_failed_jobs") == 0


def test_a_job_past_the_grace_on_its_last_attempt_is_a_dead_letter(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    mid = push(app_conn, Job("t.slow", {"s": 60}, max_attempts=1))
    app_conn.commit()
    stopped = workers("stopped", "--grace", "0.2", "--lease", "60")
    wait_until(lambda: _started_by(tmp_path, mid, 1), TIMEOUT)
    stopped.proc.send_signal(signal.SIGTERM)
    assert stopped.wait() == 1
    assert count(conn, "outbox_jobs") == 0
    dead = conn.execute_sql("SELECT message_id, attempts, exception_class FROM outbox_failed_jobs")
    assert [tuple(r) for r in dead] == [(mid, 1, "WorkerStopped")]


def test_a_second_signal_stops_at_once_leaving_the_job_to_its_lease(
    app_conn: Any, conn: Connection, workers: Any, tmp_path: Path
) -> None:
    mid = _slow(app_conn, s=60)
    worker = workers("w", "--grace", "60", "--lease", "30")
    wait_until(lambda: _started_by(tmp_path, mid, 1), TIMEOUT)
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: worker.has_event("worker.stopping"), TIMEOUT)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait() == 1
    assert any(e.get("outcome") == "stopped with jobs unfinished" for e in worker.events())
    row = conn.execute_sql(
        f"SELECT attempts, reserved_by FROM outbox_jobs WHERE message_id = '{mid}'"
    )
    assert row[0][0] == 1 and row[0][1] is not None  # held until its lease expires
