"""Producers in real processes: commits, deliberate rollbacks, hot-key deadlock storms
and SQLite's single writer. The database's own rows are the truth the checks read."""

from __future__ import annotations

import json

from tests.fault_harness import (
    check_intents,
    fetch,
    finish,
    role_argv,
    spawn,
)
from tests.reliability.producers import install_hot_rows


def _producers(url: str, n: int, count: int, rollback_ratio: float) -> list[dict[str, object]]:
    procs = [
        spawn(
            role_argv(
                "produce",
                "--url",
                url,
                "--prefix",
                f"p{i}",
                "--count",
                str(count),
                "--rollback-ratio",
                str(rollback_ratio),
                "--seed",
                str(i),
            )
        )
        for i in range(n)
    ]
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
    procs = [
        spawn(
            role_argv(
                "storm",
                "--url",
                ledger_url,
                "--hot-keys",
                str(hot),
                "--transactions",
                "25",
                "--per-tx",
                "3",
                "--seed",
                str(i),
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
        assert r["committed"] == 25
    rows = fetch(ledger_url, "SELECT message_id FROM outbox_messages")
    assert len(rows) == hot
    seen: dict[str, str] = {}
    for r in results:
        for key, mid in r["ids"].items():
            assert seen.setdefault(key, mid) == mid
    assert set(seen.values()) == {row[0] for row in rows}
    counters = fetch(ledger_url, "SELECT sum(n) FROM harness_hot")
    assert int(counters[0][0]) == 5 * 25 * 3
