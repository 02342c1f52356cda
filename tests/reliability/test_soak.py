"""Soak mode (``OUTBOX_SOAK=1``): long runs with faults, and ``REPORT.md`` from them.

Regenerate the report with::

    OUTBOX_SOAK=1 .venv/bin/pytest tests/reliability/test_soak.py

``OUTBOX_SOAK_JOBS`` sets the jobs per run (default 25,000; five runs make 125,000).
Each run: four producers (10 % rolled back on purpose), two relays and three workers
under a supervisor that SIGKILLs a random relay or worker every 0.5-2 s, or restarts
the private PostgreSQL cluster every 10 s. Recovery time: from a fault until the ledger
of executions moves again.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures import databases as backends
from tests.fixtures.fault_harness import (
    WORKER_READY,
    check_delivery,
    fetch,
    finish,
    relay_argv,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.gaps import Gap, skip_mark
from tests.fixtures.pg_cluster import PgCluster
from tests.fixtures.supervisor import Supervisor
from tests.reliability.conftest import SOAK, migrated

pytestmark = [
    pytest.mark.soak,
    skip_mark(not SOAK, Gap.SOAK_ONLY),
    pytest.mark.timeout(3 * 3600),
]
JOBS = int(os.environ.get("OUTBOX_SOAK_JOBS", "25000"))
PRODUCERS, WORKERS, CONCURRENCY, PREFETCH = 4, 3, 4, 2
REPORT = Path(__file__).with_name("REPORT.md")
COMMAND = "OUTBOX_SOAK=1 .venv/bin/pytest tests/reliability/test_soak.py"


def _executions(url: str) -> int:
    return int(fetch(url, "SELECT count(*) FROM harness_ledger")[0][0])


def _drained(url: str) -> bool:
    pending = fetch(url, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'")
    jobs = fetch(url, "SELECT count(*) FROM outbox_jobs")
    return int(pending[0][0]) == 0 and int(jobs[0][0]) == 0


def _recovery(url: str, before: int) -> float:
    """Seconds until executions move again (or nothing is left to execute)."""
    return wait_until(
        lambda: _executions(url) > before or _drained(url), 300, "progress after a fault"
    )


def _soak(
    url: str,
    tmp: Path,
    fault: str,
    inject: Callable[[Supervisor, random.Random], object],
    every: tuple[float, float],
) -> dict[str, object]:
    rng = random.Random(fault)
    env = {"HARNESS_URL": url}
    crew = Supervisor(tmp)
    for i in range(2):
        crew.add(
            f"relay{i}",
            relay_argv(url, batch_size=200, poll_interval=0.05),
            ready="relay.watch",
        )
    for i in range(WORKERS):
        crew.add(
            f"worker{i}",
            worker_argv(url, concurrency=CONCURRENCY, lease=2.0),
            ready=WORKER_READY,
            env=env,
        )
    per = JOBS // PRODUCERS
    producers = spawn_producers(url, PRODUCERS, per, env=env)
    faults, worst = 0, 0.0
    began = time.monotonic()
    try:
        while any(p.poll() is None for p in producers):
            time.sleep(rng.uniform(*every))
            before = _executions(url)
            inject(crew, rng)
            faults += 1
            crew.revive()
            worst = max(worst, _recovery(url, before))
        for proc in producers:
            code, _, err = finish(proc, 3600)
            assert code == 0, err
        wait_until(lambda: crew.revive() >= 0 and _drained(url), 1800, "the crew to drain")
    finally:
        crew.wait_ready()
        results = crew.stop()
    for name, (code, out) in results.items():
        assert code == 0, (name, out[-3000:])
    # Each worker SIGKILL, and each restart for every worker, can leave executed jobs
    # unacknowledged (at most concurrency + prefetch per worker): those run again.
    worker_kills = sum(m.kills for n, m in crew.members.items() if n.startswith("worker"))
    cuts = worker_kills + (0 if fault.startswith("SIGKILL") else faults * WORKERS)
    verdict = check_delivery(url, extra_allowed=cuts * (CONCURRENCY + PREFETCH))
    lost = [p for p in verdict.problems if "never executed" in p or "without" in p]
    return {
        "fault": f"{fault} ({faults}x)",
        "traffic": f"{PRODUCERS} producers x {per}, 10% rolled back; 2 relays, 3 workers",
        "runs": 1,
        "jobs": verdict.committed,
        "lost": len(lost),
        "double handoffs": verdict.double_runs,
        "extra executions": verdict.extra_executions,
        "max recovery s": round(worst, 2),
        "minutes": round((time.monotonic() - began) / 60, 1),
        "crashes": crew.crashes,
        "problems": verdict.problems,
    }


HEAD = [
    "fault",
    "backend",
    "traffic",
    "runs",
    "jobs",
    "lost",
    "double handoffs",
    "extra executions",
    "max recovery s",
    "crashes",
    "minutes",
]


def _earlier_rows() -> list[dict[str, str]]:
    """Rows of the report on disk, so runs of single scenarios add up to one table."""
    if not REPORT.exists():
        return []
    table = []
    for ln in REPORT.read_text().splitlines():  # the first table only (the soak's)
        if ln.startswith("| "):
            table.append(ln)
        elif table and not ln.startswith("|"):
            break
    if not table:
        return []
    head = [c.strip() for c in table[0].strip("|").split("|")]
    return [
        dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True))
        for ln in table[1:]
    ]


def _scenario(row: dict[str, Any]) -> tuple[str, str]:
    return str(row["fault"]).split(" (")[0], str(row["backend"])


def _record_row(row: dict[str, Any]) -> None:
    """Add this run's row to the report, replacing an earlier row of the same scenario."""
    mine = _scenario(row)
    rows: list[dict[str, Any]] = [r for r in _earlier_rows() if _scenario(r) != mine]
    rows.append(row)
    lines = [
        "# Reliability report (soak mode)",
        "",
        f"Regenerate: `{COMMAND}` (jobs per run: `OUTBOX_SOAK_JOBS`, default 25,000;",
        "`-k` picks scenarios; each run replaces its own row).",
        "Extra executions are re-runs of jobs a SIGKILLed worker had executed but not yet",
        "acknowledged (ordinary handlers: at-least-once); each run checks that they stay",
        "within what the kills explain. Crashes: processes that exited by themselves and",
        "were restarted by the supervisor (as systemd's Restart=always would).",
        "",
        "| " + " | ".join(HEAD) + " |",
        "|" + "---|" * len(HEAD),
    ]
    lines += ["| " + " | ".join(str(r.get(h, "")) for h in HEAD) + " |" for r in rows]
    total = sum(int(str(r["jobs"])) for r in rows)
    lines += ["", f"Total jobs: {total:,}.", ""]
    rest = REPORT.read_text().split("\n## ", 1) if REPORT.exists() else []
    tail = "\n## " + rest[1] if len(rest) == 2 else ""  # the sections after it (JetStream)
    REPORT.write_text("\n".join(lines) + tail)


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_soak_sigkill_relays_and_workers(backend: str, db_url: str, tmp_path: Path) -> None:
    url = migrated(db_url)
    row = _soak(url, tmp_path, "SIGKILL relays+workers", Supervisor.kill_random, (0.5, 2.0))
    _record_row({**row, "backend": backend})
    assert row["problems"] == []


def test_soak_postgresql_restarts(pg_private: PgCluster, tmp_path: Path) -> None:
    with psycopg.connect(pg_private.url(), autocommit=True) as c:
        c.execute('CREATE DATABASE "soak"')
    url = migrated(pg_private.url("soak"))
    row = _soak(
        url,
        tmp_path,
        "PostgreSQL restart (immediate)",
        lambda crew, rng: pg_private.restart("immediate"),
        (8.0, 12.0),
    )
    _record_row({**row, "backend": "postgresql (private cluster)"})
    assert row["problems"] == []
