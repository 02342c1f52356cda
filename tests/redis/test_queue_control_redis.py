"""``outbox queue stats/failed/retry/forget/pause/resume --broker redis://`` through the
CLI, and ``outbox worker --broker redis://`` as the CLI runs it: the same commands and
messages as on JetStream, never a payload, an exception message or a password."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from outbox.cli import main
from outbox.queue.redis import names
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import cli_argv, finish, spawn
from tests.fixtures.ports import free_port
from tests.fixtures.processes import wait_until
from tests.nats.test_metrics_broker import _get
from tests.redis import entries
from tests.redis.test_worker_redis import runs, work_until

rq, locked_redis, ledger = entries.rq, entries.locked_redis, entries.ledger  # fixtures, by name




def cli(tmp_path: Path, *args: str, url: str = entries.URL) -> Any:
    argv = ["--database-url", sqlite_url(tmp_path), *args, "--broker", url]
    return CliRunner().invoke(main, argv)


def test_pause_and_resume_say_what_changed(rq: Any, tmp_path: Path) -> None:
    r, queue = rq
    entries.add_job(r, queue, "t.ok")  # a queue with keys (one without: test_queue_jobs_cancel)
    assert cli(tmp_path, "queue", "pause", queue).output == f"paused queue {queue}\n"
    assert r.exists(names.paused_key(queue))
    assert cli(tmp_path, "queue", "pause", queue).output == f"queue {queue} was paused already\n"
    assert cli(tmp_path, "queue", "resume", queue).output == f"resumed queue {queue}\n"
    assert cli(tmp_path, "queue", "resume", queue).output == f"queue {queue} was not paused\n"
    assert not r.exists(names.paused_key(queue))


def test_failed_lists_dead_letters_without_messages_and_retry_runs_them_again(
    rq: Any, tmp_path: Path, ledger: Path
) -> None:
    r, queue = rq
    job_id = entries.add_job(r, queue, "t.fail", {"secret-payload": 1})
    work_until(queue, lambda: len(entries.dead(r, queue)) == 1)
    listing = cli(tmp_path, "queue", "failed")
    assert listing.exit_code == 0 and job_id in listing.output and "RuntimeError" in listing.output
    assert "secret" not in listing.output
    shown = cli(tmp_path, "queue", "failed", "--show", job_id)
    assert "secret-exception-text" in shown.output  # the one place the message is shown
    stats = cli(tmp_path, "queue", "stats", "--json")
    assert orjson.loads(stats.output)["queues"][queue]["dead"] == 1
    assert cli(tmp_path, "queue", "retry", job_id).exit_code == 0
    assert entries.dead(r, queue) == [] and r.xlen(names.stream(queue)) == 1
    work_until(queue, lambda: len(entries.dead(r, queue)) == 1)
    assert runs(ledger)[job_id] == 4  # two attempts again: re-driven with attempts at 0
    forgot = cli(tmp_path, "queue", "forget", job_id, "--yes")
    assert forgot.output == f"forgot {job_id}\n" and entries.dead(r, queue) == []
    missing = cli(tmp_path, "queue", "forget", job_id, "--yes")
    assert missing.exit_code == 1 and "no dead letter on Redis" in missing.output


def test_the_cli_worker_runs_the_queue_and_stops_when_empty(
    rq: Any, tmp_path: Path, ledger: Path
) -> None:
    r, queue = rq
    ids = entries.add_jobs(r, queue, 5)
    result = cli(tmp_path, "worker", queue, "--app", "tests.nats.app:registry",
                 "--stop-when-empty", "--sleep", "0.1")
    assert result.exit_code == 0, result.output
    assert runs(ledger) == {i: 1 for i in ids}


def test_a_wrong_password_exits_1_with_one_line_and_no_password(
    locked_redis: int, tmp_path: Path
) -> None:
    url = f"redis://:wrong-pass-123@127.0.0.1:{locked_redis}/0"
    result = cli(tmp_path, "worker", "q", "--app", "tests.nats.app:registry", url=url)
    assert result.exit_code == 1
    assert "wrong-pass-123" not in result.output
    assert f"127.0.0.1:{locked_redis}/0: authentication failed" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_bad_redis_url_is_a_usage_error_that_never_echoes_it(tmp_path: Path) -> None:
    result = cli(tmp_path, "queue", "pause", "q", url="redis://:pw-xyz@host:notaport/0")
    assert result.exit_code == 2 and "pw-xyz" not in result.output


def test_the_cli_worker_serves_metrics_and_readiness_with_the_redis_backlog(
    rq: Any, tmp_path: Path, ledger: Path
) -> None:
    r, queue = rq
    r.set(names.paused_key(queue), "1")  # the jobs stay ready while it is scraped
    entries.add_jobs(r, queue, 3)
    port = free_port()
    argv = cli_argv(sqlite_url(tmp_path), "worker", queue, "--app", "tests.nats.app:registry",
                    "--broker", entries.URL, "--metrics-port", str(port), "--sleep", "0.1")
    proc = spawn(argv, {"NATS_TEST_LEDGER": str(ledger)})
    try:
        wait_until(lambda: _get(port, "/readyz")[0] == 200, 30, "the worker to be ready")
        metrics = _get(port, "/metrics")[1]
        assert f'outbox_queue_ready_jobs{{queue="{queue}"}} 3.0' in metrics
        assert "s3cret" not in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc, 30)
    assert code == 0, err[-2000:]

