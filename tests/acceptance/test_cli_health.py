"""Health checks for cron: ``status --max-failed/--max-dead``, ``relay --fail-on-quarantine``
and the versioned shape of ``status --json`` (documented in docs/reference/status-json.md)."""

from __future__ import annotations

import re

import orjson
from click.testing import CliRunner, Result

from outbox import Job
from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.queue import Worker, WorkerConfig, push
from tests.fixtures.databases import raw_connect
from tests.fixtures.relays import record_many, set_column
from tests.fixtures.workers import ROOT, count, registry


def cli(db_url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args], env=env)


def _quarantine_one(db_url: str, conn: Connection) -> str:
    bad, _good = record_many(db_url, ["h-bad", "h-good"])
    set_column(conn, bad, "payload", "[")
    assert cli(db_url, "relay").exit_code == 0
    return bad


def _dead_letters(database: Database, db_url: str, n: int) -> None:
    app = raw_connect(db_url)
    for _ in range(n):
        push(app, Job("t.permanent", queue="health"))
    app.commit()
    app.close()
    Worker(database, registry, WorkerConfig(queues={"health": 1}, stop_when_empty=True)).run()


def test_status_exits_3_when_quarantined_or_dead_counts_pass_their_limit(
    database: Database, db_url: str, conn: Connection
) -> None:
    _quarantine_one(db_url, conn)
    _dead_letters(database, db_url, 2)
    assert cli(db_url, "status", "--max-failed", "1", "--max-dead", "2").exit_code == 0
    failed = cli(db_url, "status", "--max-failed", "0")
    assert failed.exit_code == 3
    assert "threshold exceeded: 1 quarantined > 0" in failed.stderr
    dead = cli(db_url, "status", "--json", "--max-dead", "1")
    assert dead.exit_code == 3
    assert "threshold exceeded: 2 dead letters > 1" in dead.stderr
    assert orjson.loads(dead.stdout)["queues"]["health"]["dead"] == 2
    from_env = cli(db_url, "status", env={"OUTBOX_STATUS_MAX_DEAD": "0"})
    assert from_env.exit_code == 3, from_env.output


def test_status_limits_must_be_whole_numbers_at_least_0(database: Database, db_url: str) -> None:
    for option in ("--max-failed", "--max-dead"):
        for bad in ("-1", "many"):
            result = cli(db_url, "status", option, bad)
            assert result.exit_code == 2
            assert option in result.output


def test_relay_fail_on_quarantine_exits_3_only_when_it_quarantined(
    database: Database, db_url: str, conn: Connection
) -> None:
    bad, _good = record_many(db_url, ["f-bad", "f-good"])
    set_column(conn, bad, "payload", "[")
    run = cli(db_url, "relay", "--fail-on-quarantine")
    assert run.exit_code == 3
    assert "2 intents: 1 handed off, 1 quarantined" in run.stdout
    assert "quarantined 1 intents: see `outbox failed`" in run.stderr
    assert count(conn, "outbox_jobs") == 1  # the good one was handed off all the same
    record_many(db_url, ["f-next"])
    assert cli(db_url, "relay", "--fail-on-quarantine").exit_code == 0  # the old one is past
    assert cli(db_url, "relay", "--fail-on-quarantine", "--watch").exit_code == 2


def test_status_json_has_the_documented_versioned_shape(
    database: Database, db_url: str, conn: Connection
) -> None:
    _quarantine_one(db_url, conn)
    _dead_letters(database, db_url, 1)
    record_many(db_url, ["still-pending"])
    doc = orjson.loads(cli(db_url, "status", "--json").stdout)
    assert doc["schema_version"] == 1
    keys = {"schema_version"} | {f"outbox.{k}" for k in doc["outbox"]}
    for q in doc["queues"].values():
        keys |= {f"queues.NAME.{k}" for k in q}
    page = (ROOT / "docs" / "reference" / "status-json.md").read_text(encoding="utf-8")
    documented = set(
        re.findall(r"^\| `([a-z_.A-Z]+)` \| (?:integer|number|boolean)", page, re.M)
    )
    assert keys == documented
    counts = [v for k, v in doc["outbox"].items() if k != "oldest_pending_age_s"]
    counts += [v for q in doc["queues"].values() for k, v in q.items() if k != "paused"]
    assert all(type(v) is int for v in counts)
    assert all(type(q["paused"]) is bool for q in doc["queues"].values())
    assert isinstance(doc["outbox"]["oldest_pending_age_s"], (int, float))
