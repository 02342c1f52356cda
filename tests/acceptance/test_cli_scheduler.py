"""`outbox scheduler` and `outbox schedule list`, through click and as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest
from click.testing import CliRunner, Result

from outbox.cli import main
from outbox.db.connection import Connection, Database
from tests.fixtures.workers import ROOT

APP = "tests.fixtures.apps.scheduler:registry"


def cli(db_url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args], env=env)


def _rows(conn: Connection) -> list[tuple[object, ...]]:
    return [
        tuple(r)
        for r in conn.execute_sql("SELECT job_name, queue FROM outbox_messages ORDER BY job_name")
    ]


def test_scheduler_once_records_the_latest_tick_of_each_schedule_once(
    database: Database, db_url: str, conn: Connection
) -> None:
    first = cli(db_url, "scheduler", "--once", "--app", APP)
    assert first.exit_code == 0, first.output
    assert "recorded 2 new ticks" in first.stdout
    again = cli(db_url, "scheduler", "--once", "--app", APP)  # a second scheduler: replays
    assert again.exit_code == 0, again.output
    assert "recorded 0 new ticks; 2 due were recorded already" in again.stdout  # issue 24
    assert _rows(conn) == [("acc.elsewhere", "default"), ("acc.nightly", "periodic")]
    assert "p-7" not in first.output + again.output


def test_schedule_list_shows_last_and_next_ticks_without_payloads(
    database: Database, db_url: str
) -> None:
    before = cli(db_url, "schedule", "list", "--app", APP)
    assert before.exit_code == 0, before.output
    assert "acc.nightly" in before.stdout and "0 12 * * *" in before.stdout
    assert "Europe/Berlin" in before.stdout
    cli(db_url, "scheduler", "--once", "--app", APP)
    listed = cli(db_url, "schedule", "list", "--app", APP, "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in map(orjson.loads, listed.stdout.splitlines())}
    assert rows["acc.nightly"]["last_tick"].endswith("T00:00:00+00:00")
    assert rows["acc.nightly"]["next_tick"] > rows["acc.nightly"]["last_tick"]
    assert rows["acc.noon_berlin"]["job"] == "acc.elsewhere"
    assert "p-7" not in before.output + listed.output


def test_options_are_checked_and_read_from_the_environment(
    database: Database, db_url: str, conn: Connection
) -> None:
    bad = cli(db_url, "scheduler", "--once", "--app", APP, "--catch-up", "some")
    assert bad.exit_code == 2 and "'some' is not one of" in bad.output
    empty = cli(db_url, "scheduler", "--once", "--app", "tests.fixtures.apps.scheduler:empty")
    assert empty.exit_code == 2 and "declares no periodic jobs" in empty.output
    missing = cli(db_url, "scheduler", "--once")
    assert missing.exit_code == 2 and "--app" in missing.output
    env = {"OUTBOX_SCHEDULER_APP": APP, "OUTBOX_SCHEDULER_CATCH_UP": "none"}
    from_env = cli(db_url, "scheduler", "--once", env=env)
    assert from_env.exit_code == 0, from_env.output
    assert "recorded 0 new ticks" in from_env.stdout and _rows(conn) == []


def test_help_texts_say_what_the_commands_do() -> None:
    for args, phrase in (
        (["scheduler", "--help"], "once however many schedulers run"),
        (["schedule", "list", "--help"], "last recorded tick"),
        (["init", "--help"], "never overwrites"),
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and phrase in " ".join(result.output.split())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_the_scheduler_process_runs_until_signalled_then_exits_0(
    database: Database, db_url: str, conn: Connection, sig: signal.Signals
) -> None:
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "outbox", "--log-format", "json", "scheduler", "--app", APP],
        env=env,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        end = time.monotonic() + 60
        while len(_rows(conn)) < 2:
            assert proc.poll() is None and time.monotonic() < end
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "scheduler stopped; recorded 2 ticks" in out
    events = [
        orjson.loads(line)["event"] for line in (out + err).splitlines() if line.startswith("{")
    ]
    assert "schedule.tick" in events and "scheduler.stopped" in events
    assert "p-7" not in out + err
