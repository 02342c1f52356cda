"""``OUTBOX_POOLER`` is checked where it is used: the CLI refuses a bad value before a
command runs (exit 2); ``import outbox`` never fails on it (issue 24, item 8)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.fixtures.workers import ROOT


def _outbox(pooler: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_POOLER": pooler}
    return subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", "sqlite://", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_unknown_pooler_mode_is_refused_naming_the_variable() -> None:
    done = _outbox("statement", "migrate")
    assert done.returncode == 2
    assert "OUTBOX_POOLER must be one of none, session, transaction, not 'statement'" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_the_known_pooler_modes_are_accepted() -> None:
    for mode in ("transaction", "session", "none", ""):
        assert _outbox(mode, "migrate").returncode == 0, mode
