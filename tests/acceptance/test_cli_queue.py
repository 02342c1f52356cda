"""`outbox worker`, `outbox queue ...` and `outbox demo`, through click and as processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from outbox import Job
from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.ids import new_message_id
from outbox.queue import Worker, WorkerConfig, push
from tests.fixtures.workers import ROOT, count, registry, worker_cmd

SECRET = "it broke: secret-detail"  # the message t.fail raises; only --show may print it
PAYLOAD_SECRET = "payload-secret-4711"


def cli(db_url: str, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args], input=stdin)


def _push(app_conn: Any, *jobs: Job, delay: float = 0) -> list[str]:
    ids = [push(app_conn, j, delay=delay) for j in jobs]
    app_conn.commit()
    return ids


def _dead_letter(database: Database, app_conn: Any, n: int = 1) -> list[str]:
    ids = _push(app_conn, *[Job("t.permanent", {"secret": PAYLOAD_SECRET}) for _ in range(n)])
    Worker(database, registry, WorkerConfig(stop_when_empty=True)).run()
    return ids


def test_jobs_and_stats_list_without_payloads(
    database: Database, db_url: str, app_conn: Any
) -> None:
    ready, delayed = _push(
        app_conn,
        Job("t.noop", {"secret": PAYLOAD_SECRET}, queue="search"),
        Job("t.noop", {"secret": PAYLOAD_SECRET}, queue="mail"),
    )
    _push(app_conn, Job("t.noop", {"secret": PAYLOAD_SECRET}, queue="mail"), delay=600)
    result = cli(db_url, "queue", "jobs")
    assert result.exit_code == 0, result.output
    assert ready in result.stdout and delayed in result.stdout
    assert "delayed" in result.stdout and "ready" in result.stdout
    assert PAYLOAD_SECRET not in result.output
    only = cli(db_url, "queue", "jobs", "--queue", "search")
    assert ready in only.stdout and delayed not in only.stdout
    stats = cli(db_url, "queue", "stats", "--json")
    assert stats.exit_code == 0, stats.output
    data = orjson.loads(stats.stdout)["queues"]
    assert {q: (c["ready"], c["delayed"], c["reserved"], c["dead"]) for q, c in data.items()} == {
        "mail": (1, 1, 0, 0),
        "search": (1, 0, 0, 0),
    }


def test_jobs_lists_a_job_waiting_for_its_ordering_key_with_its_own_due_time(
    db_url: str, app_conn: Any
) -> None:
    first, second = _push(
        app_conn, *[Job("t.noop", {"n": n}, ordering_key="order:1") for n in range(2)])
    result = cli(db_url, "queue", "jobs")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    states = {r[0]: r[3] for r in rows if r and r[0] in (first, second)}
    assert states == {first: "ready", second: "waiting"}
    assert "9999" not in result.stdout and "+" not in result.stdout  # its own due time


def test_failed_lists_classes_and_show_prints_one_message_and_trace(
    database: Database, db_url: str, app_conn: Any
) -> None:
    (mid,) = _dead_letter(database, app_conn)
    listed = cli(db_url, "queue", "failed")
    assert listed.exit_code == 0, listed.output
    assert mid in listed.stdout and "PermanentFailure" in listed.stdout
    assert "cannot ever work" not in listed.output and PAYLOAD_SECRET not in listed.output
    shown = cli(db_url, "queue", "failed", "--show", mid)
    assert shown.exit_code == 0, shown.output
    assert "cannot ever work" in shown.stdout and "Traceback" in shown.stdout
    assert PAYLOAD_SECRET not in shown.output


def test_retry_requeues_a_dead_letter_with_attempts_reset(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    (mid,) = _dead_letter(database, app_conn)
    result = cli(db_url, "queue", "retry", mid)
    assert result.exit_code == 0, result.output
    assert "requeued 1" in result.stdout
    row = conn.execute_sql("SELECT message_id, attempts, reserved_by, payload FROM outbox_jobs")
    assert tuple(row[0])[:3] == (mid, 0, None) and PAYLOAD_SECRET in row[0][3]
    assert count(conn, "outbox_failed_jobs") == 0


def test_retry_all_requeues_every_dead_letter(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    ids = _dead_letter(database, app_conn, 3)
    result = cli(db_url, "queue", "retry", "all")
    assert result.exit_code == 0 and "requeued 3" in result.stdout
    assert {r[0] for r in conn.execute_sql("SELECT message_id FROM outbox_jobs")} == set(ids)
    assert count(conn, "outbox_failed_jobs") == 0


def test_forget_asks_first_and_deletes_only_when_confirmed(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    (mid,) = _dead_letter(database, app_conn)
    refused = cli(db_url, "queue", "forget", mid, stdin="n\n")
    assert refused.exit_code == 1
    assert count(conn, "outbox_failed_jobs") == 1
    agreed = cli(db_url, "queue", "forget", mid, stdin="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert count(conn, "outbox_failed_jobs") == 0


def test_remove_and_clear_delete_waiting_jobs_with_yes(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    first, *_ = _push(app_conn, *[Job("t.noop", i, queue="q1") for i in range(3)])
    _push(app_conn, Job("t.noop", 0, queue="q2"))
    assert cli(db_url, "queue", "remove", first, "--yes").exit_code == 0
    assert count(conn, "outbox_jobs") == 3
    assert cli(db_url, "queue", "clear", "--queue", "q1", "--yes").exit_code == 0
    assert [tuple(r) for r in conn.execute_sql("SELECT queue FROM outbox_jobs")] == [("q2",)]
    refused = cli(db_url, "queue", "clear", stdin="n\n")
    assert refused.exit_code == 1 and count(conn, "outbox_jobs") == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("queue", "retry", "not-an-id"), 2, "is not a message id"),
        (("queue", "forget", "42", "--yes"), 2, "is not a message id"),
        (("queue", "remove", "42", "--yes"), 2, "is not a message id"),
        (("queue", "failed", "--show", "42"), 2, "is not a message id"),
        (("queue", "remove", new_message_id(), "--yes"), 1, "no job with message id"),
        (("queue", "retry", new_message_id()), 1, "no dead letter with message id"),
        (("queue", "failed", "--show", new_message_id()), 1, "no dead letter with message id"),
        (("queue", "clear", "--queue", "bad queue!", "--yes"), 2, "is not a queue name"),
        (("queue", "jobs", "0"), 2, "is not in the range"),
    ],
)
def test_bad_ids_and_names_are_refused_and_change_nothing(
    database: Database,
    db_url: str,
    app_conn: Any,
    conn: Connection,
    args: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    _push(app_conn, Job("t.noop", 1))
    result = cli(db_url, *args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert count(conn, "outbox_jobs") == 1


def test_worker_refuses_an_app_that_is_not_a_registry(database: Database, db_url: str) -> None:
    result = cli(db_url, "worker", "--app", "tests.fixtures.workers:seed_jobs", "--once")
    assert result.exit_code == 2
    assert "is not an outbox.Registry" in result.output
    missing = cli(db_url, "worker", "--app", "no_such_module_xyz:registry", "--once")
    assert missing.exit_code == 2 and "no module named 'no_such_module_xyz'" in missing.output
    caps = cli(db_url, "worker", "search=zero", "--app", "tests.fixtures.workers:registry")
    assert caps.exit_code == 2


def test_worker_process_runs_one_job_with_once(
    database: Database, db_url: str, app_conn: Any, conn: Connection, tmp_path: Path
) -> None:
    _push(app_conn, Job("t.log", 1), Job("t.log", 2))
    env = {**os.environ, "OUTBOX_TEST_RUNLOG": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        worker_cmd(db_url, "--once"), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert count(conn, "outbox_jobs") == 1
    assert '"outcome":"stopped gracefully"' in done.stderr


def test_demo_runs_green_on_a_fresh_sqlite_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "demo", "--intents", "120"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "check: OK" in out
    assert "set to fail once" in out.splitlines()[1]  # said up front, before the figures
    assert "dead-lettered            1" in out
    assert "12 rolled back" in out
    assert "periodic job ran         1 time" in out
    assert "event listeners ran      2 (notify_team, update_feed)" in out
    assert "paused, then resumed     0 jobs claimed in 0.5 s paused; drained once resumed" in out
    assert (tmp_path / "outbox.db").exists()
    assert "Traceback" not in done.stderr
