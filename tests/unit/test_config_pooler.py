"""``OUTBOX_POOLER`` is checked when the process starts, not at its first connection."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.fixtures.workers import ROOT


def _outbox(pooler: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_POOLER": pooler}
    return subprocess.run(
        [sys.executable, "-m", "outbox", "--help"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_unknown_pooler_mode_is_refused_naming_the_variable() -> None:
    done = _outbox("session")
    assert done.returncode != 0
    assert "OUTBOX_POOLER must be one of none, transaction, not 'session'" in done.stderr


def test_the_known_pooler_modes_are_accepted() -> None:
    for mode in ("transaction", "none", ""):
        assert _outbox(mode).returncode == 0, mode
