"""Relays under faults: SIGKILLed at random while traffic flows, a connection cut around
COMMIT, and rows corrupted by hand. Nothing committed is lost or handed off twice."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from outbox import Job, record
from outbox.db.connection import Connection, Database
from outbox.errors import DatabaseError
from outbox.relay import Relay, RelayConfig
from tests.fixtures.databases import backend_of, raw_connect
from tests.fixtures.fault_harness import (
    check_handoff,
    cli_argv,
    fetch,
    finish,
    kill_relays_while_producing,
    pending_count,
    relay_argv,
    spawn,
    spawn_producers,
    wait_until,
)
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.supervisor import Supervisor


@pytest.mark.slow
def test_relays_killed_at_random_hand_off_every_intent_exactly_once(
    ledger_url: str, tmp_path: Path
) -> None:
    argv = relay_argv(ledger_url, batch_size=7, poll_interval=0.02)
    kill_relays_while_producing(
        ledger_url, [argv] * 3, tmp_path, seed=6, per_producer=120, pause=0.005,
        nap=(0.1, 0.4),
    )
    verdict = check_handoff(ledger_url)
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 240


def _seed(url: str, n: int) -> list[str]:
    app = raw_connect(url)
    ids = [record(app, f"cut:{i}", Job("notes.index", {"i": i})) for i in range(n)]
    app.commit()
    app.close()
    return ids


def _killer(url: str, conn: Connection) -> Callable[[], None]:
    """A function that drops ``conn``'s server session from another session."""
    kind = backend_of(url)
    sql = "SELECT pg_backend_pid()" if kind == "postgresql" else "SELECT CONNECTION_ID()"
    victim = conn.execute_sql(sql)[0][0]

    def kill() -> None:
        admin = raw_connect(url)
        cur = admin.cursor()
        if kind == "postgresql":
            cur.execute("SELECT pg_terminate_backend(%s)", (victim,))
        else:
            cur.execute(f"KILL CONNECTION {int(victim)}")
        admin.commit()
        admin.close()

    return kill


@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_connection_dropped_around_commit_is_read_back_on_the_next_run(
    database: Database, ledger_url: str, when: str
) -> None:
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_FILE)
    ids = _seed(ledger_url, 5)
    relay = Relay(database, RelayConfig(batch_size=10))
    conn = database.connect()
    kill, commit = _killer(ledger_url, conn), conn._backend.commit

    def cut_commit(raw: Any) -> None:
        if when == "before_commit":
            kill()
            commit(raw)
        else:
            commit(raw)
            kill()

    conn._backend = dataclasses.replace(conn._backend, commit=cut_commit)
    relay._conn.use(conn)
    if when == "before_commit":
        with pytest.raises(DatabaseError):
            relay.run_once()
        assert pending_count(ledger_url) == 5
    else:
        assert relay.run_once().handed_off == 5
        with pytest.raises(DatabaseError):
            relay.run_once()  # the dead session shows itself on the next use

    totals = relay.run()
    relay.close()
    assert totals.handed_off == (5 if when == "before_commit" else 0)
    queued = sorted(r[0] for r in fetch(ledger_url, "SELECT message_id FROM outbox_jobs"))
    assert queued == sorted(ids)
    assert pending_count(ledger_url) == 0


CORRUPTIONS: dict[str, tuple[str, str | None]] = {
    # key -> (UPDATE ... SET clause, the reason the relay must give; None: left alone)
    "truncated": ("payload = substr(payload, 1, 5)", "invalid_json"),
    "null_payload": ("payload = NULL", "invalid_json"),
    "fingerprint": ("fingerprint = 'deadbeef'", "fingerprint_mismatch"),
    "name": ("job_name = 'bad name!'", "invalid_name"),
    "queue": ("queue = 'x''; DROP TABLE outbox_jobs; --'", "invalid_queue"),
    "attempts": ("max_attempts = 0", "invalid_max_attempts"),
    "reordered": ('payload = \'{"z":1, "a":2}\'', "fingerprint_mismatch"),
    "state": ("state = 'zombie'", None),
}


def test_corrupted_rows_are_quarantined_and_their_peers_go_through(ledger_url: str) -> None:
    app = raw_connect(ledger_url)
    ids = {
        k: record(app, f"bad:{k}", Job("notes.index", {"a": 2, "z": 1}))
        for k in [*CORRUPTIONS, "good1", "good2"]
    }
    app.commit()
    ph = "?" if backend_of(ledger_url) == "sqlite" else "%s"
    cur = app.cursor()
    for k, (change, _) in CORRUPTIONS.items():
        cur.execute(f"UPDATE outbox_messages SET {change} WHERE message_id = {ph}", (ids[k],))
    app.commit()
    app.close()

    code, _out, err = finish(spawn(cli_argv(ledger_url, "relay")), 120)
    assert code == 0, err

    rows = {
        r[0]: (r[1], r[2])
        for r in fetch(ledger_url, "SELECT message_id, state, failure_reason FROM outbox_messages")
    }
    for k, (_, reason) in CORRUPTIONS.items():
        expected = ("failed", reason) if reason else ("zombie", None)
        assert rows[ids[k]] == expected, k
    queued = {r[0] for r in fetch(ledger_url, "SELECT message_id FROM outbox_jobs")}
    assert queued == {ids["good1"], ids["good2"]}
    listed = finish(spawn(cli_argv(ledger_url, "failed")), 60)
    assert listed[0] == 0, listed[2]
    for k, (_, reason) in CORRUPTIONS.items():
        if reason:
            assert ids[k] in listed[1]
    assert '"a"' not in listed[1] + listed[2] and "DROP TABLE" not in listed[1] + listed[2]


@pytest.mark.slow
def test_many_relays_and_producers_on_hot_rows_retry_and_lose_nothing(
    ledger_url: str, tmp_path: Path
) -> None:
    relays = Supervisor(tmp_path)
    for i in range(4):
        relays.add(
            f"relay{i}",
            relay_argv(ledger_url, batch_size=3, poll_interval=0.01, log_level="debug"),
            ready="relay.watch",
        )
    producers = spawn_producers(ledger_url, 4, 100)
    try:
        for proc in producers:
            code, out, err = finish(proc, 240)
            assert code == 0, err
            assert '"leaked": {}' in out and '"record_errors": {}' in out, out
        wait_until(lambda: pending_count(ledger_url) == 0, 120, "relays to drain")
    finally:
        relays.wait_ready()
        results = relays.stop()

    for name, (code, out) in results.items():
        assert code == 0, (name, out[-2000:])
        assert "relay.batch_failed" not in out, (name, out[-2000:])
    verdict = check_handoff(ledger_url)
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 400


def test_status_accounts_for_a_row_with_an_unknown_state(ledger_url: str) -> None:
    app = raw_connect(ledger_url)
    ids = [record(app, f"s:{i}", Job("notes.index", {"i": i})) for i in range(3)]
    app.commit()
    ph = "?" if backend_of(ledger_url) == "sqlite" else "%s"
    cur = app.cursor()
    cur.execute(f"UPDATE outbox_messages SET state = 'zombie' WHERE message_id = {ph}", (ids[0],))
    app.commit()
    app.close()

    code, out, err = finish(spawn(cli_argv(ledger_url, "status", "--json")), 60)
    assert code in (0, 3), err
    counts = json.loads(out)["outbox"]
    accounted = sum(v for k, v in counts.items() if k != "oldest_pending_age_s")
    assert accounted == 3, counts
