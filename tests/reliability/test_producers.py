"""Producers in real processes: commits, deliberate rollbacks, hot-key deadlock storms
and SQLite's single writer. The database's own rows are the truth the checks read."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.fixtures.databases import backend_of
from tests.fixtures.fault_harness import (
    WORKER_READY,
    check_delivery,
    check_intents,
    cli_argv,
    fetch,
    finish,
    pending_count,
    role_argv,
    spawn,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.supervisor import Supervisor
from tests.reliability.producers import install_hot_rows

TRANSACTIONS = 40


def _producers(url: str, n: int, count: int, rollback_ratio: float) -> list[dict[str, object]]:
    procs = spawn_producers(url, n, count, rollback_ratio=rollback_ratio)
    results = []
    for proc in procs:
        code, out, err = finish(proc, 240)
        assert code == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_committed_intents_exist_exactly_and_rolled_back_ones_never(ledger_url: str) -> None:
    results = _producers(ledger_url, n=3, count=40, rollback_ratio=0.25)

    verdict = check_intents(ledger_url)
    assert verdict.problems == []
    assert verdict.committed == sum(int(r["committed"]) for r in results)  # type: ignore[call-overload]
    assert verdict.rolled_back == sum(int(r["rolled_back"]) for r in results)  # type: ignore[call-overload]
    assert verdict.committed + verdict.rolled_back == 120
    assert verdict.rolled_back > 0
    pending = fetch(ledger_url, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'")
    assert pending[0][0] == verdict.committed


def test_sqlite_four_writing_processes_never_surface_database_locked(
    sqlite_ledger_url: str,
) -> None:
    results = _producers(sqlite_ledger_url, n=4, count=120, rollback_ratio=0.1)

    for r in results:
        assert r["record_errors"] == {} and r["other_errors"] == {} and r["leaked"] == {}
        assert r["retries"] == 0, r
    verdict = check_intents(sqlite_ledger_url)
    assert verdict.problems == []
    assert verdict.committed + verdict.rolled_back == 480


def test_hot_key_deadlock_storm_retries_and_keeps_one_intent_per_key(ledger_url: str) -> None:
    hot = 8
    install_hot_rows(ledger_url, hot)
    start_at = time.time() + 3.0  # every process connected and waiting by then
    procs = [
        spawn(
            role_argv(
                "storm",
                "--url",
                ledger_url,
                "--hot-keys",
                str(hot),
                "--transactions",
                str(TRANSACTIONS),
                "--per-tx",
                "3",
                "--seed",
                str(i),
                "--start-at",
                str(start_at),
            )
        )
        for i in range(5)
    ]
    results = []
    for proc in procs:
        code, out, err = finish(proc, 240)
        assert code == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    for r in results:
        assert r["errors"] == {} and r["mismatch"] == [], r
        assert r["committed"] == TRANSACTIONS
    rows = fetch(ledger_url, "SELECT message_id FROM outbox_messages")
    assert len(rows) == hot
    seen: dict[str, str] = {}
    for r in results:
        for key, mid in r["ids"].items():
            assert seen.setdefault(key, mid) == mid
    assert set(seen.values()) == {row[0] for row in rows}
    if backend_of(ledger_url) != "sqlite":  # SQLite serialises writers: nothing to deadlock
        assert sum(r["retried"] for r in results) > 0, "no deadlock happened; nothing was proved"
    counters = fetch(ledger_url, "SELECT sum(n) FROM harness_hot")
    assert int(counters[0][0]) == 5 * TRANSACTIONS * 3


def test_sqlite_producers_relay_and_worker_writing_at_once_never_see_locked(
    sqlite_ledger_url: str, tmp_path: Path
) -> None:
    url = sqlite_ledger_url
    crew = Supervisor(tmp_path)
    crew.add(
        "relay",
        cli_argv(url, "relay", "--watch", "--batch-size", "5", "--poll-interval", "0.01"),
        ready="relay.watch",
    )
    crew.add(
        "worker", worker_argv(url, concurrency=4), ready=WORKER_READY, env={"HARNESS_URL": url}
    )
    try:
        results = _producers(url, n=2, count=150, rollback_ratio=0.1)
        wait_until(
            lambda: (
                not fetch(url, "SELECT count(*) FROM outbox_jobs")[0][0] and not pending_count(url)
            ),
            120,
            "relay and worker to drain",
        )
    finally:
        crew.wait_ready()
        stopped = crew.stop()

    for r in results:
        assert r["record_errors"] == {} and r["other_errors"] == {} and r["leaked"] == {}
    for name, (code, out) in stopped.items():
        assert code == 0, (name, out[-2000:])
        for sign in ("locked", "database_error", "batch_failed", "Traceback"):
            assert sign not in out, (name, sign)
    verdict = check_delivery(url)
    assert verdict.problems == [] and verdict.extra_executions == 0
