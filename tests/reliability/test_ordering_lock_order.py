"""Dead-lettering or cancelling a keyed job while a job of its key enters, in two real
processes.

``ordering.enter`` locks the key's row, then reads the key's jobs with a locking read
(MariaDB); the dead-letter path used to take (delete) the job first and lock the key's
row after, so the two waited on each other in a circle and MariaDB killed one: measured,
385 of 1,500 pushes refused as deadlock victims. Now every path locks the key's row
first (``outbox.db.shared._move_to_dead``, ``outbox.queue.control``'s cancel), and no
push is refused. It runs on MariaDB only: PostgreSQL's read does not lock, so the race
cannot happen there and the test could not fail; SQLite has one writer.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from outbox.db.connection import Connection
from tests.fixtures import databases as backends
from tests.fixtures.workers import ROOT, count

N = 600


@pytest.mark.slow
@pytest.mark.parametrize("leaving", ["dead", "cancel"])
@pytest.mark.parametrize("backend", [b for b in backends.BACKENDS if b == "mysql"])
def test_a_job_leaving_and_an_entering_job_of_its_key_never_deadlock(
    conn: Connection, db_url: str, leaving: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tests.reliability.ordering_race"]
    procs = [
        subprocess.Popen(
            [*argv, role, db_url, str(N)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for role in ("enter", leaving)
    ]
    outs = [p.communicate(timeout=300)[0].decode().strip() for p in procs]
    assert outs == ["enter errors 0", f"{leaving} errors 0"]
    assert count(conn, "outbox_failed_jobs") == N and count(conn, "outbox_jobs") == 0
    assert count(conn, "outbox_ordering_keys") == 0
