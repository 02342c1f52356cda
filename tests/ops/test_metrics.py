"""``--metrics-port``: a real relay and a real worker, scraped over HTTP while they work.

The counters must move with the work done, the names follow Prometheus' conventions,
labels carry queue and job names only (never a message id), and the probes answer.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from outbox import Job, record
from outbox.cli import main
from outbox.db.connection import Database
from outbox.db.migrate import LATEST, REQUIRED, migrate
from outbox.errors import DatabaseError
from outbox.metrics import Exporter, serving
from outbox.relay import Relay
from tests.fixtures.databases import raw_connect
from tests.fixtures.ports import free_port
from tests.fixtures.workers import ROOT

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
Q = "metq"
OUTBOX = (sys.executable, "-m", "outbox")


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """name + sorted labels → value, for every sample of one scrape."""
    _, body = _get(port, "/metrics")
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(port: int, name: str, **labels: str) -> float:
    return _samples(port).get((name, tuple(sorted(labels.items()))), 0.0)


def _wait_until(check: object, what: str, rounds: int = 600) -> None:
    for _ in range(rounds):
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def processes(database: Database, db_url: str, tmp_path: Path) -> Iterator[tuple[int, int]]:
    relay_port, worker_port = free_port(), free_port()
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_LOG_LEVEL": "warning"}
    with (
        open(tmp_path / "relay.out", "w") as relay_out,
        open(tmp_path / "worker.out", "w") as w_out,
    ):
        yield from _run(env, relay_out, w_out, relay_port, worker_port, tmp_path)


def _run(
    env: dict[str, str], relay_out: Any, w_out: Any, relay_port: int, worker_port: int, tmp: Path
) -> Iterator[tuple[int, int]]:
    relay = subprocess.Popen(
        [*OUTBOX, "relay", "--watch", "--poll-interval", "0.05", "--metrics-port", str(relay_port)],
        cwd=ROOT,
        env=env,
        stdout=relay_out,
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            *OUTBOX,
            "worker",
            Q,
            "--app",
            "tests.ops.apps:registry",
            "--sleep",
            "0.05",
            "--lease",
            "3",
        ],
        cwd=ROOT,
        env={**env, "OUTBOX_METRICS_PORT": str(worker_port)},  # the shared variable
        stdout=w_out,
        stderr=subprocess.STDOUT,
    )
    try:
        for port in (relay_port, worker_port):
            _wait_until(lambda p=port: _up(p), f"metrics on port {port}")
        yield relay_port, worker_port
    finally:
        for proc in (relay, worker):
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in (relay, worker)]
        logs = {n: (tmp / f"{n}.out").read_text() for n in ("relay", "worker")}
        assert codes == [0, 0], logs


def _up(port: int) -> bool:
    try:
        return _get(port, "/healthz")[0] == 200
    except OSError:
        return False


def test_a_running_relay_and_worker_serve_counters_that_move(
    processes: tuple[int, int], db_url: str
) -> None:
    relay_port, worker_port = processes
    for port in processes:
        assert _get(port, "/readyz") == (200, f"ok: schema version {LATEST}\n")
        assert _get(port, "/nothing")[0] == 404
    app = raw_connect(db_url)
    jobs = [Job("ops.noop", queue=Q)] * 5 + [Job("ops.permanent", queue=Q)] * 2
    jobs.append(Job("ops.fail", queue=Q, max_attempts=2))
    for n, job in enumerate(jobs):
        record(app, f"metrics:{n}", job)
    app.commit()
    app.close()

    def dead() -> float:
        return sum(
            _value(worker_port, "outbox_jobs_dead_total", queue=Q, job=j)
            for j in ("ops.permanent", "ops.fail")
        )

    _wait_until(lambda: dead() == 3, "three dead letters counted")
    _wait_until(
        lambda: _value(worker_port, "outbox_jobs_succeeded_total", queue=Q, job="ops.noop") == 5,
        "five successes counted",
    )
    w = _samples(worker_port)
    assert w[("outbox_jobs_retried_total", (("job", "ops.fail"), ("queue", Q)))] == 1
    assert w[("outbox_jobs_failed_total", (("job", "ops.fail"), ("queue", Q)))] == 2
    assert w[("outbox_job_run_seconds_count", (("job", "ops.noop"), ("queue", Q)))] == 5
    assert w[("outbox_job_start_latency_seconds_count", (("queue", Q),))] == 9
    assert w[("outbox_jobs_in_flight", (("queue", Q),))] == 0
    assert ("outbox_queue_ready_jobs", (("queue", Q),)) in w
    assert w[("outbox_leases_lost_total", ())] == 0
    assert ("outbox_lease_renewals_total", ()) in w

    r = _samples(relay_port)
    assert r[("outbox_relay_handed_off_total", ())] == 8
    assert r[("outbox_relay_quarantined_total", ())] == 0
    assert r[("outbox_relay_batch_duration_seconds_count", ())] >= 1
    _wait_until(lambda: _value(relay_port, "outbox_pending_intents") == 0, "backlog read again")
    assert ("outbox_oldest_pending_age_seconds", ()) in _samples(relay_port)

    exported = set()
    for port in processes:
        _, body = _get(port, "/metrics")
        for f in text_string_to_metric_families(body):
            if not f.name.endswith("_created"):  # prometheus-client's creation times
                exported.add(f.name + "_total" if f.type == "counter" else f.name)
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    assert exported == set(re.findall(r"^\| `(outbox_[a-z_]+)` \|", page, re.M))

    for port in processes:
        _, body = _get(port, "/metrics")
        assert not UUID.search(body)
        for family in text_string_to_metric_families(body):
            assert family.name.startswith("outbox_"), family.name
            relay_only = family.name.startswith(("outbox_relay", "outbox_pending", "outbox_oldest"))
            both = family.name == "outbox_transactions_retried"
            assert both or relay_only == (port == relay_port), family.name
            if family.type == "counter":
                assert all(s.name.endswith(("_total", "_created")) for s in family.samples)


def test_readyz_says_what_is_missing_and_healthz_notices_a_stalled_loop(
    db_url: str,
) -> None:
    db = Database(db_url)
    exporter = Exporter(db, "worker", queues=["q"])
    port = exporter.start("127.0.0.1", free_port())
    try:
        status, body = _get(port, "/readyz")
        expected = f"schema at version 0, expected {REQUIRED}: run outbox migrate"
        assert status == 503 and expected in body
        assert _get(port, "/healthz") == (200, "ok\n")
        exporter.stale_after = 0.0
        status, body = _get(port, "/healthz")
        assert status == 503 and body.startswith("no progress for")
    finally:
        exporter.stop()
    with db.connect() as conn:
        migrate(conn)
    again = Exporter(db, "relay")
    port = again.start("127.0.0.1", free_port())
    try:
        assert _get(port, "/readyz")[0] == 200
    finally:
        again.stop()


def test_metrics_port_goes_with_watch_and_must_be_a_port(db_url: str) -> None:
    run = CliRunner().invoke(main, ["--database-url", db_url, "relay", "--metrics-port", "9"])
    assert run.exit_code == 2 and "--metrics-port goes with --watch" in run.output
    bad = CliRunner().invoke(
        main, ["--database-url", db_url, "worker", "--app", "x:y", "--metrics-port", "0"]
    )
    assert bad.exit_code == 2 and "--metrics-port" in bad.output


def test_transactions_retried_are_counted_by_operation(tmp_path: Path) -> None:
    """A relay whose database stays busy retries, three times, and each retry counts."""
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    db = Database(url, sqlite_busy_timeout_ms=20)
    with db.connect() as conn:
        migrate(conn)
    port = free_port()
    blocker = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # holds the writer lock throughout
        with serving(db, "relay", port) as exporter:
            assert exporter is not None
            with Relay(db, hooks=exporter) as relay, pytest.raises(DatabaseError):
                relay.run_once()
            assert _value(port, "outbox_transactions_retried_total", operation="relay batch") == 3
        assert db.on_retry is None  # the hook ends with the block
    finally:
        blocker.rollback()
        blocker.close()


def test_a_port_in_use_is_one_clear_error(database: Database, db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = CliRunner().invoke(
            main,
            ["--database-url", db_url, "relay", "--watch", "--metrics-port", str(port)],
        )
    assert run.exit_code == 1
    assert f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use" in run.output
