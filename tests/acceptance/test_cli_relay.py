"""`outbox relay/status/failed/retry/prune`, through click and as real processes."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time

import orjson
import pytest
from click.testing import CliRunner, Result

from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.ids import new_message_id
from tests.fixtures.factories import Rows
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.relays import (
    MARKER,
    db_now_ms,
    outbox_rows,
    queued_ids,
    record_many,
    set_column,
)


def cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--database-url", db_url, *args])


def test_relay_hands_off_everything_pending_and_prints_one_summary(
    database: Database, db_url: str, conn: Connection
) -> None:
    ids = record_many(db_url, ["a", "b", "c"])
    result = cli(db_url, "relay", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines() == [result.stdout.strip().splitlines()[0]]  # one line
    assert "relayed 3 intents: 3 handed off, 0 quarantined, in 2 batches" in result.stdout
    assert "relaying" not in result.stderr  # no progress bar without a terminal
    assert queued_ids(conn) == ids


def test_relay_stops_at_limit(database: Database, db_url: str, conn: Connection) -> None:
    ids = record_many(db_url, [f"l{i}" for i in range(5)])
    result = cli(db_url, "relay", "2", "--batch-size", "1")
    assert result.exit_code == 0, result.output
    assert queued_ids(conn) == ids[:2]


@pytest.mark.parametrize(
    "args",
    [
        ["relay", "5", "--watch"],
        ["relay", "--poll-only"],
        ["relay", "--batch-size", "0"],
        ["relay", "0"],
        ["prune", "-1"],
        ["failed", "0"],
        ["retry", "not-a-uuid"],
    ],
)
def test_bad_arguments_are_usage_errors(
    database: Database, db_url: str, conn: Connection, args: list[str]
) -> None:
    [mid] = record_many(db_url, ["u"])
    result = cli(db_url, *args)
    assert result.exit_code == 2, result.output
    assert "Error" in result.stderr
    assert outbox_rows(conn) == {mid: ("pending", None, False)}


def test_status_prints_counts_and_json_in_the_documented_shape(
    database: Database, db_url: str, conn: Connection
) -> None:
    record_many(db_url, ["s1", "s2"])
    assert cli(db_url, "relay").exit_code == 0
    record_many(db_url, ["s3"])
    text = cli(db_url, "status")
    assert text.exit_code == 0, text.output
    lines = [line.split() for line in text.stdout.splitlines()]
    assert lines[:2] == [
        ["PENDING", "PUBLISHED", "QUARANTINED", "OLDEST_PENDING_AGE"],
        ["1", "2", "0", *lines[1][3:]],
    ]
    assert ["QUEUE", "READY", "DELAYED", "RESERVED", "DEAD_LETTERS", "STATE"] in lines
    assert ["q1", "2", "0", "0", "0", "active"] in lines
    as_json = cli(db_url, "status", "--json")
    assert as_json.exit_code == 0
    doc = orjson.loads(as_json.stdout)
    assert set(doc["outbox"]) == {
        "pending",
        "published",
        "failed",
        "quarantined",
        "unknown_state",
        "oldest_pending_age_s",
    }
    assert doc["outbox"]["pending"] == 1
    assert doc["queues"] == {
        "q1": {
            "ready": 2,
            "delayed": 0,
            "reserved": 0,
            "dead": 0,
            "dead_letters": 0,
            "paused": False,
        }
    }


def test_status_exits_3_when_a_threshold_is_exceeded(
    database: Database, db_url: str, conn: Connection
) -> None:
    [old, _] = record_many(db_url, ["t1", "t2"])
    set_column(conn, old, "created_at", db_now_ms(conn) - 120_000)
    assert cli(db_url, "status", "--max-pending", "2", "--max-age", "600").exit_code == 0
    too_many = cli(db_url, "status", "--max-pending", "1")
    assert too_many.exit_code == 3
    assert "threshold exceeded: 2 pending > 1" in too_many.stderr
    too_old = cli(db_url, "status", "--json", "--max-age", "60")
    assert too_old.exit_code == 3
    assert "oldest pending" in too_old.stderr
    assert orjson.loads(too_old.stdout)["outbox"]["pending"] == 2


def test_failed_retry_and_prune_work_together_and_never_print_payloads(
    database: Database, db_url: str, conn: Connection
) -> None:
    ids = record_many(db_url, ["f1", "f2", "f3"])
    [(original,)] = conn.execute_sql(
        f"SELECT payload FROM outbox_messages WHERE message_id = '{ids[1]}'"
    )
    set_column(conn, ids[1], "payload", f'{{"note":"{MARKER}", "x": ')
    outputs = [cli(db_url, "--log-level", "debug", "relay")]
    listed = cli(db_url, "failed")
    outputs.append(listed)
    assert listed.exit_code == 0
    [header, line, footer] = listed.stdout.strip().splitlines()
    assert header.split() == ["MESSAGE_ID", "REASON", "CREATED_AT", "QUARANTINED_AT"]
    assert footer == "(1 shown, LIMIT 50)"
    assert line.split()[:2] == [ids[1], "invalid_json"]

    refused = cli(db_url, "retry", ids[1])
    outputs.append(refused)
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: message ")
    assert "invalid_json" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    set_column(conn, ids[1], "payload", original)
    retried = cli(db_url, "retry", ids[1])
    outputs.append(retried)
    assert retried.exit_code == 0
    assert f"message {ids[1]} returned to pending" in retried.stdout
    outputs.append(cli(db_url, "relay"))
    assert queued_ids(conn) == [ids[0], ids[2], ids[1]]

    pruned = cli(db_url, "prune", "0", "2")
    outputs.append(pruned)
    assert pruned.exit_code == 0
    assert "pruned 2 keys of handed-off intents older than 0 days" in pruned.stdout
    assert len(outbox_rows(conn)) == 1
    outputs += [cli(db_url, "status"), cli(db_url, "status", "--json"), cli(db_url, "failed")]
    for result in outputs:
        assert MARKER not in result.output
        assert MARKER not in result.stderr


def test_retry_accept_current_and_errors_exit_1_with_one_line(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["x"])
    set_column(conn, mid, "payload", '{"edited": 1}')
    assert cli(db_url, "relay").exit_code == 0
    unknown = cli(db_url, "retry", new_message_id())
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("error: no outbox message ")
    accepted = cli(db_url, "retry", "--accept-current", mid)
    assert accepted.exit_code == 0
    assert "accepted as it is" in accepted.stdout
    again = cli(db_url, "retry", mid)
    assert again.exit_code == 1
    assert "is pending, not failed" in again.stderr


def test_prune_help_says_it_ends_deduplication() -> None:
    result = CliRunner().invoke(main, ["prune", "--help"])
    assert result.exit_code == 0
    assert "ends deduplication" in " ".join(result.output.split())


def test_commands_on_an_unmigrated_database_fail_with_one_clear_line(db_url: str) -> None:
    for args in (["status"], ["relay"], ["failed"]):
        result = cli(db_url, *args)
        assert result.exit_code == 1, result.output
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and "`outbox migrate`" in line
        assert "Traceback" not in result.output


def test_log_level_debug_adds_the_traceback_before_the_one_line_error(db_url: str) -> None:
    result = cli(db_url, "--log-level", "debug", "status")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("Traceback (most recent call last)")
    assert lines[-1].startswith("error: ")
    assert "outbox migrate" in lines[-1]


def _outbox(db_url: str, *args: str, stderr: int) -> subprocess.Popen[str]:
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_LOG_FORMAT": "json"}
    return subprocess.Popen(
        [sys.executable, "-m", "outbox", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_relay_watch_runs_until_signalled_then_exits_0(
    database: Database, db_url: str, conn: Connection, sig: signal.Signals
) -> None:
    proc = _outbox(db_url, "relay", "--watch", "--poll-interval", "0.05", stderr=subprocess.PIPE)
    try:
        ids = record_many(db_url, ["w1", "w2", "w3"])
        end = time.monotonic() + 60
        while len(queued_ids(conn)) < 3:
            assert proc.poll() is None and time.monotonic() < end
            time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "relayed 3 intents: 3 handed off" in out
    assert '"event": "relay.batch"' in err or '"event":"relay.batch"' in err
    assert MARKER not in out + err
    assert queued_ids(conn) == ids


def test_relay_shows_a_progress_bar_only_on_a_terminal(
    database: Database, db_url: str, backend: str
) -> None:
    skip_unless(backend, "sqlite", gap=Gap.PRESENTATION_ONLY)
    record_many(db_url, [f"p{i}" for i in range(4)])
    leader, follower = pty.openpty()
    proc = _outbox(db_url, "--log-level", "warning", "relay", "--batch-size", "1", stderr=follower)
    os.close(follower)
    out, _ = proc.communicate(timeout=60)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.returncode == 0
    assert b"relaying" in seen
    assert "relayed 4 intents" in out


def test_prune_also_drops_the_dashboard_charts_minutes_older_than_a_day(
    db_url: str, conn: Connection
) -> None:
    from outbox.queue.throughput import SUCCEEDED, Tally
    from tests.dashboard.seed import claimed

    now_s = conn.driver.clock_now() / 1000
    for worker, age_s in (("w-old", 2 * 86_400), ("w-new", 0)):
        wall = [now_s - age_s]  # the worker's clock when it counted ...
        tally = Tally(worker, wall=lambda w=wall: w[0])
        tally.add(SUCCEEDED, claimed("q"))
        wall[0] = now_s  # ... and when it wrote the counts
        tally.flush(conn.driver)
    pruned = cli(db_url, "prune", "0")
    assert pruned.exit_code == 0, pruned.output
    assert "pruned 1 per-minute chart rows older than a day" in pruned.stdout
    left = conn.execute_sql("SELECT worker_id FROM outbox_throughput")
    assert [str(w) for (w,) in left] == ["w-new"]
    again = cli(db_url, "prune", "0")
    assert "chart rows" not in again.stdout  # nothing old left: no second line


def test_prune_also_drops_global_limit_keys_idle_for_over_an_hour(
    db_url: str, conn: Connection, rows: Rows
) -> None:
    hour = 3_600_000
    now = conn.driver.clock_now()
    rows.limit("idle", created_at=now - 2 * hour)
    rows.limit("fresh", created_at=now)
    rows.limit_start(rows.limit("busy", created_at=now - 2 * hour), started_at=now)
    pruned = cli(db_url, "prune", "0")
    assert pruned.exit_code == 0, pruned.output
    assert "pruned 1 idle limit keys" in pruned.stdout
    left = {str(k) for (k,) in conn.execute_sql("SELECT limit_key FROM outbox_limits")}
    assert left == {"fresh", "busy"}
    again = cli(db_url, "prune", "0")
    assert "limit keys" not in again.stdout


def test_prune_help_says_what_it_deletes_today() -> None:
    """Not schema 1's "published tombstones" (issue 38): the keys of handed-off intents."""
    text = CliRunner().invoke(main, ["prune", "--help"]).output
    assert "tombstone" not in text
    assert "keys of handed-off intents older than DAYS days" in " ".join(text.split())
