"""A worker whose clock runs 30 s ahead must neither claim a job early nor reap a live
lease: every time comparison uses the database's clock, never the worker's."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from outbox.db.connection import Database
from outbox.queue import push
from tests.fixtures import queue_ops as ops
from tests.fixtures.databases import raw_connect
from tests.fixtures.fault_harness import QUEUE, ROOT, fetch, finish, harness_job, spawn, worker_argv

SKEW_S = 30
SITECUSTOMIZE = f"""
import sys
import time
_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + {SKEW_S}
time.time_ns = lambda: _time_ns() + {SKEW_S} * 1_000_000_000
"""


def _skewed_env(tmp_path: Path, url: str) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": f"{tmp_path}:{ROOT}", "HARNESS_URL": url}


def test_a_worker_30s_ahead_neither_claims_early_nor_reaps_a_live_lease(
    database: Database, ledger_url: str, tmp_path: Path
) -> None:
    env = _skewed_env(tmp_path, ledger_url)
    probe = spawn([sys.executable, "-c", "import time; print(time.time())"], env)
    code, out, err = finish(probe, 60)
    assert code == 0, err
    assert float(out) - time.time() > SKEW_S - 5, "the child's clock is not skewed"

    app = raw_connect(ledger_url)
    later = push(app, harness_job("later", 1), delay=10)
    held = push(app, harness_job("held", 2))
    app.commit()
    app.close()
    with database.connect() as conn:
        claimed = ops.claim(conn, QUEUE, 1, "honest-worker", lease_ms=20_000)
    assert [j.message_id for j in claimed] == [held]
    before = fetch(
        ledger_url,
        "SELECT message_id, attempts, reserved_by, lease_expires_at,"
        " available_at FROM outbox_jobs ORDER BY id",
    )

    worker = spawn(worker_argv(ledger_url, "--stop-when-empty", lease=5.0), env)
    code, out, err = finish(worker, 120)
    assert code == 0, err

    after = fetch(
        ledger_url,
        "SELECT message_id, attempts, reserved_by, lease_expires_at,"
        " available_at FROM outbox_jobs ORDER BY id",
    )
    assert after == before
    assert [r[0] for r in after] == [later, held]
    assert fetch(ledger_url, "SELECT count(*) FROM harness_ledger")[0][0] == 0
