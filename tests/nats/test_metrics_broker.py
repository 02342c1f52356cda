"""``outbox worker --broker --metrics-port`` (``outbox.cli.broker_metrics``) as a real
process against a real nats-server: the SQL worker's job metrics by the same names,
the ready gauge from the consumer, /healthz and /readyz."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.jetstream import control
from outbox.jetstream.connect import Broker, parse_url
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import cli_argv
from tests.fixtures.ports import free_port
from tests.fixtures.processes import wait_until
from tests.fixtures.supervisor import Supervisor
from tests.nats import support


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _value(text: str, name: str, labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_broker_worker_serves_the_sql_workers_metric_names(
    nats_url: str, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    database = Database(url)
    with database.connect() as c:
        migrate(c)
    queue = support.queue_name("metrics")
    support.record_jobs(url, queue, 3, job="t.ok")
    support.record_jobs(url, queue, 1, job="t.fail", prefix="f")
    with support.relay(database, nats_url) as relay:
        relay.run()
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    port = free_port()
    argv = cli_argv(
        url, "worker", queue, "--app", "tests.nats.app:registry", "--broker", nats_url,
        "--metrics-port", str(port), "--lease", "0.9",
    )
    broker = parse_url(nats_url)
    with Broker(broker) as b:  # paused: the ready gauge must show the 4 waiting jobs
        b.call(control.pause(b.js, queue))
    fleet = Supervisor(tmp_path)
    fleet.add("w", argv, ready="worker.started", env={"NATS_TEST_LEDGER": str(ledger)})
    try:
        fleet.wait_ready()
        wait_until(
            lambda: _value(_get(port, "/metrics")[1], "outbox_queue_ready_jobs", f'queue="{queue}"')
            == 4.0,
            30,
            "the ready gauge to show the 4 waiting jobs",
        )
        with Broker(broker) as b:
            b.call(control.resume(b.js, queue))
        labels = f'job="t.ok",queue="{queue}"'
        wait_until(
            lambda: _value(_get(port, "/metrics")[1], "outbox_jobs_succeeded_total", labels)
            == 3.0,
            30,
            "3 successes counted",
        )
        fail = f'job="t.fail",queue="{queue}"'
        wait_until(
            lambda: _value(_get(port, "/metrics")[1], "outbox_jobs_dead_total", fail) == 1.0,
            30,
            "the failing job dead after its 2 attempts",
        )
        text = _get(port, "/metrics")[1]
        assert _value(text, "outbox_jobs_retried_total", fail) == 1.0
        assert _value(text, "outbox_jobs_failed_total", fail) == 2.0
        wait_until(  # the gauge is read from the consumer at most every 5 s
            lambda: _value(_get(port, "/metrics")[1], "outbox_queue_ready_jobs", f'queue="{queue}"')
            == 0.0,
            30,
            "the ready gauge to reach 0",
        )
        assert f'outbox_job_run_seconds_count{{{labels}}} 3.0' in text
        assert "outbox_jobs_in_flight" in text and "outbox_lease_renewals_total" in text
        assert "outbox_leases_lost" not in text and "secret-exception-text" not in text
        wait_until(lambda: _get(port, "/healthz")[0] == 200, 30, "/healthz")
        assert _get(port, "/readyz") == (200, "ok: broker connected\n")
    finally:
        results = fleet.stop()
    assert results["w"][0] == 0, results["w"][1][-2000:]
