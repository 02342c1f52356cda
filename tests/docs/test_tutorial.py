"""The tutorial, step by step, as a newcomer runs it: every command of every block, in order.

The install step (a checkout's editable install into a fresh venv) is run as printed by
``tests/docs/test_install.py`` (slow); here ``source .venv/bin/activate`` is this test's
own virtualenv on ``PATH``, and the example database URL becomes a fresh PostgreSQL
database. What the page says the commands print is checked against what they print.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, blocks_of, text
from tests.fixtures.databases import BACKENDS

PAGE = "tutorial.md"
EXAMPLE_URL = "postgresql://app@127.0.0.1:5432/app"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _steps() -> tuple[list[str], dict[str, str]]:
    """The shell lines of the page, in order, and the files its Python blocks name."""
    lines: list[str] = []
    files: dict[str, str] = {}
    for block in blocks_of(PAGE):
        if block.lang == "bash":
            lines += [ln.strip() for ln in block.body.splitlines() if ln.strip()]
        elif block.lang == "python":
            assert block.first.startswith("# ") and block.first.endswith(".py"), block.first
            files[block.first[2:]] = block.body
    return lines, files


def test_the_install_step_installs_from_a_checkout_and_names_the_release_beside_it() -> None:
    """Today's install is the checkout's (no release is on the package index yet); the
    install after the release is named beside it, with the same extra."""
    lines, _ = _steps()
    install = lines[0]
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install -e ")
    requirement = shlex.split(install)[-1]
    assert requirement.startswith("../outbox["), requirement
    extra = requirement.rstrip("]").split("[")[1]
    assert extra in PROJECT["optional-dependencies"]
    assert lines[1] == "source .venv/bin/activate"
    page = " ".join(text(PAGE).split())
    released = page.split("Once a release is on the index, the install is ")[1]
    assert released.startswith(f"`.venv/bin/pip install '{PROJECT['name']}[{extra}]'`"), released


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b == "postgresql"])
def test_the_tutorial_runs_as_written(db_url: str, tmp_path: Path) -> None:
    lines, files = _steps()
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OUTBOX_DATABASE_URL", None)
    outputs: list[tuple[str, str]] = []
    for line in lines[2:]:
        if line.startswith("export OUTBOX_DATABASE_URL="):
            assert line.split("=", 1)[1] == EXAMPLE_URL
            env["OUTBOX_DATABASE_URL"] = db_url
            continue
        argv = shlex.split(line)
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outputs.append((line, done.stdout + done.stderr))
    assert (tmp_path / "jobs.py").exists()
    said = dict(outputs)
    assert said["python record_welcome.py"].startswith("recorded ")
    worker = said["outbox worker default --app jobs:registry --stop-when-empty"]
    assert "\"event\":\"welcoming\"" in worker and "\"succeeded\":1," in worker
    first_status, last_status = (o for line, o in outputs if line == "outbox status")
    assert first_status.splitlines()[1].split()[:2] == ["1", "0"]  # one pending intent
    assert last_status.splitlines()[1].split()[:2] == ["0", "1"], last_status  # handed off
    assert last_status.split("\n\n")[1].strip() == "no queues", last_status  # all acknowledged
    assert "and `no queues`: the job ran" in " ".join(text(PAGE).split())
