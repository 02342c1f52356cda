"""`outbox queue pause/resume/cancel`, the PRIORITY column of `queue jobs`, and the
`paused` marker of `status` and `queue stats`, through click and as a process."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
from click.testing import CliRunner, Result

from outbox import Job, push
from outbox.cli import main
from outbox.db.connection import Connection
from outbox.db.rows import JobClaim
from outbox.ids import new_message_id
from tests.fixtures.workers import ROOT, count


def cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args])


def _state_of(table: str, queue: str) -> str:
    """The STATE cell of ``queue``'s row in a printed table."""
    (row,) = [line.split() for line in table.splitlines() if line.split()[:1] == [queue]]
    return row[-1]


def test_pause_and_resume_show_in_status_and_stats(
    conn: Connection, db_url: str, app_conn: Any
) -> None:
    push(app_conn, Job("t.noop", {}, queue="mail"))
    app_conn.commit()
    paused = cli(db_url, "queue", "pause", "search")  # no job yet: can be paused all the same
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.startswith("paused queue search; it has no jobs now")  # issue 24
    assert cli(db_url, "queue", "pause", "mail").stdout == "paused queue mail\n"
    assert cli(db_url, "queue", "resume", "mail").exit_code == 0
    again = cli(db_url, "queue", "pause", "search")  # idempotent, and says so (issue 38)
    assert (again.exit_code, again.stdout) == (0, "queue search was paused already\n")
    status = cli(db_url, "status")
    assert status.exit_code == 0, status.output
    assert "STATE" in status.stdout
    assert _state_of(status.stdout, "search") == "paused"
    assert _state_of(status.stdout, "mail") == "active"
    queues = orjson.loads(cli(db_url, "status", "--json").stdout)["queues"]
    assert (queues["search"]["paused"], queues["mail"]["paused"]) == (True, False)
    stats = cli(db_url, "queue", "stats")
    assert _state_of(stats.stdout, "search") == "paused"
    data = orjson.loads(cli(db_url, "queue", "stats", "--json").stdout)["queues"]
    assert data["search"]["paused"] is True and data["mail"]["paused"] is False
    resumed = cli(db_url, "queue", "resume", "search")
    assert (resumed.exit_code, resumed.stdout) == (0, "resumed queue search\n")
    again = cli(db_url, "queue", "resume", "search")
    assert (again.exit_code, again.stdout) == (0, "queue search was not paused\n")
    assert count(conn, "outbox_paused_queues") == 0


def test_pause_of_an_invalid_queue_name_is_a_usage_error_and_changes_nothing(
    conn: Connection, db_url: str
) -> None:
    for verb in ("pause", "resume"):
        result = cli(db_url, "queue", verb, "no spaces")
        assert result.exit_code == 2, result.output
        assert "'no spaces' is not a queue name" in result.output
    assert count(conn, "outbox_paused_queues") == 0


def test_pause_as_a_process_exits_0_and_a_bad_name_exits_2(conn: Connection, db_url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "outbox", "--database-url", db_url, "queue", *args]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)

    assert run("pause", "mail").returncode == 0
    bad = run("pause", "bad/name")
    assert bad.returncode == 2 and "not a queue name" in bad.stderr
    assert [r[0] for r in conn.execute_sql("SELECT queue FROM outbox_paused_queues")] == ["mail"]


def test_cancel_a_waiting_job_a_running_one_and_an_unknown_id(
    conn: Connection, db_url: str, app_conn: Any
) -> None:
    waiting = push(app_conn, Job("t.noop", {}), delay=600)
    running = push(app_conn, Job("t.noop", {}, queue="busy"))
    app_conn.commit()
    conn.driver.job_claim(JobClaim("busy", 1, "w:1:x", 60_000))  # a worker holds it
    done = cli(db_url, "queue", "cancel", waiting)
    assert done.exit_code == 0, done.output
    assert done.stdout == f"cancelled {waiting} (moved to the dead letters)\n"
    failed = cli(db_url, "queue", "failed")
    assert waiting in failed.stdout and "cancelled" in failed.stdout
    flagged = cli(db_url, "queue", "cancel", running)
    assert flagged.exit_code == 0, flagged.output
    assert flagged.stdout.startswith(f"cancelling {running}: a worker is running it")
    assert count(conn, "outbox_jobs", "cancel_requested_at IS NOT NULL") == 1
    before = {t: count(conn, t) for t in ("outbox_jobs", "outbox_failed_jobs")}
    unknown = new_message_id()
    missing = cli(db_url, "queue", "cancel", unknown)
    assert missing.exit_code == 1
    assert f"no job in the queue has message id {unknown}" in missing.output
    assert cli(db_url, "queue", "cancel", "nope").exit_code == 2
    assert {t: count(conn, t) for t in before} == before


def test_jobs_shows_each_jobs_priority(db_url: str, app_conn: Any) -> None:
    urgent = push(app_conn, Job("t.noop", {}), priority=0)
    later = push(app_conn, Job("t.noop", {}), priority=7)
    app_conn.commit()
    result = cli(db_url, "queue", "jobs")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    column = header.split().index("PRIORITY")
    by_id = {r.split()[0]: r.split()[column] for r in rows if r.split()[:1] in ([urgent], [later])}
    assert by_id == {urgent: "0", later: "7"}
