"""`outbox init`: the starter jobs.py, never overwritten, and the commands it prints run
as printed against the file as written."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from outbox import Job, record
from outbox.cli import main
from outbox.cli.init import starter
from outbox.testing import Clock, run_pending


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_init_writes_the_starter_and_prints_the_next_three_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "jobs.py").read_text() == starter()
    lines = result.stdout.splitlines()
    assert lines[1:] == [
        "  outbox migrate",
        "  outbox relay --watch & outbox scheduler --app jobs:registry &",
        "  outbox worker default --app jobs:registry",
    ]


def test_init_never_overwrites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs.py").write_text("# mine\n")
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 1
    assert "jobs.py exists; outbox init never overwrites" in result.output
    assert (tmp_path / "jobs.py").read_text() == "# mine\n"
    assert "--force" in CliRunner().invoke(main, ["init", "--force"]).output  # no such option


def test_init_takes_a_path_and_names_the_module_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myapp").mkdir()
    result = CliRunner().invoke(main, ["init", "myapp/tasks.py"])
    assert result.exit_code == 0, result.output
    assert "--app myapp.tasks:registry" in result.stdout
    not_py = CliRunner().invoke(main, ["init", "jobs.txt"])
    assert not_py.exit_code == 2 and "must end in .py" in not_py.output
    no_dir = CliRunner().invoke(main, ["init", "nowhere/jobs.py"])
    assert no_dir.exit_code == 1 and "is not a folder" in no_dir.output
    assert not (tmp_path / "jobs.txt").exists() and not (tmp_path / "nowhere").exists()


def test_the_starter_runs_its_job_and_its_periodic_job(tmp_path: Path, app_conn: Any) -> None:
    (tmp_path / "jobs.py").write_text(starter())
    jobs = _load(tmp_path / "jobs.py", "outbox_starter_jobs")
    clock = Clock()
    record(app_conn, "welcome:1", Job("hello.welcome", {"user_id": 1}))
    assert run_pending(app_conn, jobs.registry, clock=clock).done == 1
    clock.advance(3600)
    report = run_pending(app_conn, jobs.registry, clock=clock)
    assert report.ticks == 12 and report.done == 12


def test_the_printed_commands_run_as_printed_on_the_written_file(tmp_path: Path) -> None:
    """On SQLite (the default URL), in a fresh folder: migrate, then one look of the
    scheduler and a drain of relay and worker in place of the long-running ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}

    def outbox(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "outbox", "--log-format", "json", *args],
            cwd=tmp_path,
            env=env,
            text=True,
            capture_output=True,
            timeout=120,
            check=False,
        )

    assert outbox("init").returncode == 0
    for args in (
        ["migrate"],
        ["scheduler", "--app", "jobs:registry", "--once"],
        ["relay"],
        ["worker", "default", "--app", "jobs:registry", "--stop-when-empty"],
    ):
        done = outbox(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert "tidying" in done.stdout + done.stderr  # the periodic job ran
