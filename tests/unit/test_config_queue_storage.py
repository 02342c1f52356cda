"""``OUTBOX_QUEUE_STORAGE`` is checked where it is given: the CLI refuses a bad value
before a command runs (exit 2) and writes nothing; on SQLite (and MariaDB) ``ring``
changes nothing, the heap stays."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.fixtures.workers import ROOT


def _outbox(storage: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_QUEUE_STORAGE": storage}
    return subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", url, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )


def test_an_unknown_queue_storage_is_refused_naming_the_variable(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    done = _outbox("rings", f"sqlite:///{db}", "migrate")
    assert done.returncode == 2
    assert "OUTBOX_QUEUE_STORAGE must be one of heap, ring, not 'rings'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not db.exists() or not sqlite3.connect(db).execute(
        "SELECT name FROM sqlite_master").fetchall()  # nothing written


def test_ring_leaves_sqlite_on_the_heap(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    for storage in ("ring", "heap", ""):
        assert _outbox(storage, f"sqlite:///{db}", "migrate").returncode == 0, storage
    names = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert "outbox_jobs" in names and "outbox_queue_ring" not in names
