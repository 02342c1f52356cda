"""Every NATS path of the CLI: ``relay --target``, ``worker --broker``, ``queue
stats/failed/retry/forget --broker`` and ``status --target``, against a real
nats-server (``tests/nats/servers.py``), some as real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from outbox.cli import main
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.jetstream import names
from tests.fixtures.databases import sqlite_url
from tests.nats import conftest as nats_fixtures
from tests.nats import support

nats_server = nats_fixtures.nats_server  # the session's throwaway nats-server
nats_url = nats_fixtures.nats_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("NATS_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    db_url = sqlite_url(tmp_path)
    with Database(db_url).connect() as c:
        migrate(c)
    return db_url


def cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args])


def process(db_url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", db_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_one_shot_relay_to_nats_hands_off_everything_per_batch_and_exits_0(
    url: str, nats_url: str
) -> None:
    queue = support.queue_name()
    ids = support.record_jobs(url, queue, 5)
    code, out, err = process(
        url, "relay", "--batch-size", "2", env={"OUTBOX_RELAY_TARGET": nats_url}
    )
    assert code == 0, err
    assert "relayed 5 intents: 5 handed off, 0 quarantined, in 3 batches" in out
    assert support.stream_ids(nats_url, names.stream(queue)) == {i: 1 for i in ids}


@pytest.mark.parametrize("backend", ["postgresql", "mysql"], indirect=True)
def test_one_shot_relay_with_batches_in_flight_hands_off_everything_once(
    database: Database, db_url: str, nats_url: str
) -> None:
    queue = support.queue_name()
    ids = support.record_jobs(db_url, queue, 21)
    code, out, err = process(
        db_url, "relay", "--target", nats_url, "--batch-size", "4", "--in-flight", "3"
    )
    assert code == 0, err
    said = re.search(r"relayed 21 intents: 21 handed off, 0 quarantined, in (\d+) batches", out)
    assert said and int(said.group(1)) >= 6, out  # a batch side by side may come back short
    assert support.stream_ids(nats_url, names.stream(queue)) == {i: 1 for i in ids}


def test_an_unreachable_broker_is_one_line_and_exit_1_without_the_password(url: str) -> None:
    support.record_jobs(url, "q", 2)
    code, out, err = process(url, "relay", "--target", "nats://ops:hunter2@127.0.0.1:1")
    assert code == 1
    assert err.strip().count("\n") == 0 and err.startswith("error: cannot reach NATS")
    assert "Traceback" not in err + out and "hunter2" not in err + out
    assert support.outbox_rows(url) == (2, 2)


def test_require_names_the_missing_stream_and_changes_nothing(url: str, nats_url: str) -> None:
    queue = support.queue_name()
    support.record_jobs(url, queue, 2)
    result = cli(url, "relay", "--target", nats_url, "--provisioning", "require")
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert names.stream(queue) in line and "--provisioning require" in line
    assert support.outbox_rows(url) == (2, 2)


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--target", "ftp://h"], 2, "accepted: sql or nats://"),
        (["--target", "nats://h:port"], 2, "not a number"),
        (["--target", "NATS_URL", "--duplicate-window", "5"], 1, "retry horizon"),
        (
            ["--target", "NATS_URL", "--in-flight", "0"],
            2,
            "'--in-flight' (env var: 'OUTBOX_RELAY_IN_FLIGHT'): 0 is not in the range 1<=x<=8",
        ),
        (["--target", "NATS_URL", "--in-flight", "9"], 2, "9 is not in the range 1<=x<=8"),
    ],
)
def test_bad_relay_targets_are_refused_in_one_line(
    url: str, nats_url: str, args: list[str], code: int, says: str
) -> None:
    args = [nats_url if a == "NATS_URL" else a for a in args]
    support.record_jobs(url, "q", 1)
    result = cli(url, "relay", *args)
    assert result.exit_code == code and says in result.output
    assert support.outbox_rows(url) == (1, 1)


def test_worker_on_nats_runs_the_jobs_and_queue_commands_manage_dead_letters(
    url: str, nats_url: str, tmp_path: Path
) -> None:
    queue = support.queue_name()
    ok_ids = support.record_jobs(url, queue, 3)
    [dead_id] = support.record_jobs(
        url, queue, 1, job="t.fail", prefix="f", payload={"secret": "payload-text"}
    )
    assert cli(url, "relay", "--target", nats_url).exit_code == 0
    worker = [
        "worker",
        queue,
        "--app",
        "tests.nats.app:registry",
        "--broker",
        nats_url,
        "--stop-when-empty",
        "--sleep",
        "1",
    ]
    for _ in range(2):  # the failing job's second attempt waits out its backoff
        code, _, err = process(url, *worker)
        assert code == 0, err
    ran = (tmp_path / "ledger.txt").read_text()
    assert all(i in ran for i in ok_ids)

    stats = cli(url, "queue", "stats", "--broker", nats_url, "--json")
    assert stats.exit_code == 0, stats.output
    assert orjson.loads(stats.stdout)["queues"][queue] == {
        "ready": 0,
        "reserved": 0,
        "dead": 1,
        "dead_letters": 1,
    }
    failed = cli(url, "queue", "failed", "--broker", nats_url)
    assert dead_id in failed.stdout and "RuntimeError" in failed.stdout
    assert "secret-exception-text" not in failed.stdout and "payload-text" not in failed.stdout
    shown = cli(url, "queue", "failed", "--broker", nats_url, "--show", dead_id)
    assert "secret-exception-text" in shown.stdout  # only when the operator asks

    assert cli(url, "queue", "retry", "--broker", nats_url, dead_id).stdout.startswith(
        "re-drove 1 job(s)"
    )
    assert support.msg_ids(nats_url, queue)[0][1] == dead_id
    missing = cli(url, "queue", "forget", "--broker", nats_url, "--yes", dead_id)
    assert missing.exit_code == 1 and "no dead letter" in missing.stderr
    code, _, err = process(url, *worker)
    assert code == 0, err
    assert cli(url, "queue", "retry", "--broker", nats_url, "all").exit_code == 0
    process(url, *worker)
    forgot = cli(url, "queue", "forget", "--broker", nats_url, "--yes", dead_id)
    assert forgot.exit_code == 0 and forgot.stdout.strip() == f"forgot {dead_id}"


def test_worker_with_transactional_handlers_on_a_broker_needs_the_inbox_migrated(
    tmp_path: Path, nats_url: str
) -> None:
    """The inbox lives in --database-url: one not migrated is one line at start."""
    (tmp_path / "bare").mkdir()
    bare = sqlite_url(tmp_path / "bare")
    Database(bare).connect().close()
    code, _, err = process(
        bare, "worker", "q", "--app", "tests.nats.app:transactional", "--broker", nats_url
    )
    assert code == 1 and "outbox migrate" in err and "Traceback" not in err


def test_status_shows_a_full_stream_refusing(url: str, nats_url: str) -> None:
    queue = support.queue_name()
    support.record_jobs(url, queue, 3)
    result = cli(url, "relay", "--target", nats_url, "--stream-max-msgs", "2")
    assert result.exit_code == 1 and "is full (setting max_msgs" in result.stderr
    table = cli(url, "status", "--target", nats_url)
    assert table.exit_code == 0
    [row] = [line for line in table.stdout.splitlines() if names.stream(queue) in line]
    assert "no: full (max_msgs)" in row
    data = orjson.loads(cli(url, "status", "--target", nats_url, "--json").stdout)
    assert names.stream(queue) in data["target"]["refusing"]
    assert data["outbox"]["pending"] == 1


def test_stream_limits_and_publish_timeout_options_shape_new_streams(
    url: str, nats_url: str
) -> None:
    queue = support.queue_name()
    support.record_jobs(url, queue, 2)
    result = cli(
        url,
        "relay",
        "--target",
        nats_url,
        "--stream-max-bytes",
        "1000000",
        "--replicas",
        "1",
        "--publish-timeout",
        "2",
        "--duplicate-window",
        "60",
    )
    assert result.exit_code == 0, result.output
    data = orjson.loads(cli(url, "status", "--target", nats_url, "--json").stdout)
    stream = data["target"]["streams"][names.stream(queue)]
    assert (stream["max_bytes"], stream["max_msgs"], stream["messages"]) == (1000000, -1, 2)
    table = cli(url, "queue", "stats", "--broker", nats_url)
    [row] = [line.split() for line in table.stdout.splitlines() if line.startswith(queue)]
    assert row == [queue, "2", "0", "0"]  # ready, reserved, dead letters


BLOCK_NATS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "nats" or name.startswith("nats."):
            raise ImportError("nats-py is not installed")
sys.meta_path.insert(0, Block())
from outbox.cli import main
main.main(sys.argv[1:], prog_name="outbox")
"""


def test_without_the_nats_extra_the_cli_works_and_nats_urls_say_what_to_install(
    url: str,
) -> None:
    def run_blocked(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", BLOCK_NATS, "--database-url", url, *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )

    assert run_blocked("status").returncode == 0
    refused = run_blocked("relay", "--target", "nats://127.0.0.1:4222")
    assert refused.returncode == 1
    want = "error: NATS needs the nats extra: pip install 'outbox-relay[nats]'"
    assert refused.stderr.strip() == want
