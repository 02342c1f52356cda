"""`outbox worker --queue-concurrency` and apps with global limits, through the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from outbox import Job, Registry
from outbox.cli import main
from outbox.db.connection import Connection
from outbox.queue import push
from tests.fixtures.workers import ROOT, count

APP = "tests.fixtures.workers:registry"


def cli(db_url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args], env=env)


def _push(app_conn: Any, n: int, queue: str = "default") -> None:
    for i in range(n):
        push(app_conn, Job("t.noop", {"i": i}, queue=queue))
    app_conn.commit()


BAD_SPECS = [
    ("default=0", "'default=0': write QUEUE=N with N a whole number >= 1"),
    ("default", "'default': write QUEUE=N"),
    ("bad name=2", "'bad name' is not a queue name"),
    ("mail=2", "queue 'mail' is not one this worker runs (default)"),
]


def test_a_bad_queue_concurrency_is_a_usage_error_and_claims_nothing(
    db_url: str, app_conn: Any, conn: Connection
) -> None:
    _push(app_conn, 1)
    for spec, message in BAD_SPECS:
        result = cli(db_url, "worker", "--app", APP, "--once", "--queue-concurrency", spec)
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "--queue-concurrency" in result.output
    assert count(conn, "outbox_jobs", "attempts = 0 AND reserved_by IS NULL") == 1
    assert count(conn, "outbox_limits") == 0


def test_a_worker_with_a_queue_limit_runs_the_queue_through_the_gate(
    db_url: str, app_conn: Any, conn: Connection
) -> None:
    _push(app_conn, 5, queue="mail")
    result = cli(
        db_url,
        "worker",
        "mail",
        "--app",
        APP,
        "--stop-when-empty",
        "--concurrency",
        "3",
        env={"OUTBOX_WORKER_QUEUE_CONCURRENCY": "mail=2"},
    )
    assert result.exit_code == 0, result.output
    assert count(conn, "outbox_jobs") == 0
    assert count(conn, "outbox_limits") == 1  # the queue's key row: the gate was used
    assert count(conn, "outbox_limit_slots") == 0


def test_an_app_with_a_malformed_rate_is_refused_before_claiming_anything(
    db_url: str, app_conn: Any, conn: Connection, tmp_path: Path
) -> None:
    (tmp_path / "rateapp.py").write_text(
        "from outbox import Registry\n"
        "registry = Registry()\n"
        "@registry.job('t.noop', rate='fast')\n"
        "def noop(payload, ctx):\n"
        "    pass\n"
    )
    _push(app_conn, 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUTBOX_LOG_FORMAT": "json"}
    cmd = [sys.executable, "-m", "outbox", "--database-url", db_url]
    done = subprocess.run(
        [*cmd, "worker", "--app", "rateapp:registry"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "job 't.noop': rate 'fast' is not a rate" in done.stderr
    assert "Traceback" not in done.stderr
    assert count(conn, "outbox_jobs", "attempts = 0 AND reserved_by IS NULL") == 1


def test_the_docs_example_registers_its_limits() -> None:
    page = (ROOT / "docs" / "how-to" / "queue-control.md").read_text(encoding="utf-8")
    start = page.index("\n## Global concurrency and rate limits\n")
    section = page[start:].split("\n## ", 2)[1]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    ns: dict[str, Any] = {"registry": Registry()}
    exec(example, ns)
    limited = ns["registry"].limited
    assert sorted(limited) == ["crm.push", "mail.send", "sync.account"]
    assert limited["sync.account"].key is not None
    assert str(limited["mail.send"].rate) == "100/m"
