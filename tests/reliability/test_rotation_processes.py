"""Key rotation online, in real processes: producers record, a relay and a worker run,
and ``outbox keys rotate`` re-encrypts the backlog under the new key at the same time.
Nothing is lost, run twice or quarantined, nobody sees a lock error, and afterwards every
row is under the new key (a second rotate finishes what the first passed over)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.fixtures.fault_harness import (
    WORKER_READY,
    check_delivery,
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

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(64, 96))).decode()
OLD = {"OUTBOX_ENCRYPTION_KEYS": f"k1:{K1}"}
NEW = {"OUTBOX_ENCRYPTION_KEYS": f"k2:{K2},k1:{K1}"}


def _status(url: str) -> dict[str, object]:
    code, out, err = finish(spawn(cli_argv(url, "keys", "status", "--json"), NEW), 60)
    assert code == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def _producers_as(url: str, prefix: str, n: int, count: int) -> list[object]:
    procs = [
        spawn(
            role_argv(
                "produce",
                *("--url", url, "--prefix", f"{prefix}{i}", "--count", str(count)),
                *("--rollback-ratio", "0.1", "--seed", str(i), "--pause", "0.01"),
            ),
            NEW,
        )
        for i in range(n)
    ]
    return list(procs)


def test_rotation_races_producers_a_relay_and_a_worker(ledger_url: str, tmp_path: Path) -> None:
    url = ledger_url
    for proc in spawn_producers(url, 2, 60, rollback_ratio=0.1, env=OLD):  # a k1 backlog
        code, _, err = finish(proc, 240)
        assert code == 0, err
    assert _status(url)["keys"] == {"k1": pending_count(url)}
    crew = Supervisor(tmp_path)
    crew.add(
        "relay",
        cli_argv(url, "relay", "--watch", "--batch-size", "10", "--poll-interval", "0.05"),
        ready="relay.watch",
        env=NEW,
    )
    crew.add(
        "worker",
        worker_argv(url, concurrency=2),
        ready=WORKER_READY,
        env={"HARNESS_URL": url, **NEW},
    )
    try:
        producers = _producers_as(url, "n", 2, 40)
        rotate = spawn(cli_argv(url, "keys", "rotate", "--batch", "7"), NEW)
        code, out, err = finish(rotate, 240)
        assert code == 0, err
        resealed = int(out.split("under key k2: ")[1].split()[0].replace(",", ""))
        assert resealed > 0  # it ran while the relay and the worker moved the backlog
        for proc in producers:
            code, _, err = finish(proc, 240)
            assert code == 0, err
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
    for name, (code, log) in stopped.items():
        assert code == 0, (name, log[-2000:])
        for sign in ("locked", "database_error", "Traceback", "MissingKey", "TamperedPayload"):
            assert sign not in log, (name, sign)
    verdict = check_delivery(url)
    assert verdict.problems == [] and verdict.extra_executions == 0
    finish(spawn(cli_argv(url, "keys", "rotate"), NEW), 120)  # whatever the race passed over
    keys = _status(url)["keys"]
    assert set(keys) <= {"k2"}, keys  # type: ignore[arg-type]
