"""A rolling upgrade: after ``outbox migrate``, version-1 producers and relays keep
running beside version-2 ones for a while. Nothing is lost, handed off twice or stranded,
and both versions deduplicate against each other's keys.

The same actor script runs both versions: ``PYTHONPATH`` picks the package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from outbox.db.connection import Database
from outbox.relay import Relay, admin
from tests.upgrade.test_migration_2 import ACTOR, ROOT, migrate_v2, v1

KEYS = 60
RELAY_BOUND_S = 120  # a bound for a hung producer, never a timed assertion


def start(package: Path, url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, str(ACTOR), url, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    parsed: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return parsed


@pytest.mark.slow
def test_v1_and_v2_side_by_side_lose_nothing_double_nothing_strand_nothing(
    v1_package: Path, db_url: str, tmp_path: Path
) -> None:
    v1(v1_package, db_url, "migrate")
    history: dict[str, str] = v1(v1_package, db_url, "populate")["ids"]
    migrated = migrate_v2(db_url)
    _, err = migrated.communicate(timeout=300)
    assert migrated.returncode == 0, err

    # v1 records A*, replays B*; v2 records B*, replays A*; both relays run meanwhile;
    # v1 also replays keys handed off before the upgrade.
    # The relays race each other and the producers until every producer is done (a
    # file says so), not for a fixed time.
    done = tmp_path / "producers_done"
    relays = {
        "v1_relay": start(v1_package, db_url, "relay-loop", str(RELAY_BOUND_S), str(done)),
        "v2_relay": start(ROOT, db_url, "relay-loop", str(RELAY_BOUND_S), str(done)),
    }
    procs = {
        "v1_producer": start(v1_package, db_url, "record", "A", str(KEYS), "B"),
        "v2_producer": start(ROOT, db_url, "record", "B", str(KEYS), "A"),
        "v1_replay": start(v1_package, db_url, "record", "queued", "4", "done"),
    }
    out = {name: result(p) for name, p in procs.items()}
    done.touch()
    out |= {name: result(p) for name, p in relays.items()}
    v1_ids, v2_ids = out["v1_producer"]["ids"], out["v2_producer"]["ids"]

    keys = [f"A{i}" for i in range(KEYS)] + [f"B{i}" for i in range(KEYS)]
    assert set(v1_ids) == set(v2_ids) == set(keys)
    assert all(len(v1_ids[k]) == 36 for k in keys), {
        k: v1_ids[k] for k in keys if len(v1_ids[k]) != 36
    }
    assert {k: v1_ids[k] for k in keys} == {k: v2_ids[k] for k in keys}  # one intent a key
    replays = out["v1_replay"]["ids"]
    assert {k: replays[k] for k in ("queued0", "queued3")} == {
        k: history[k] for k in ("queued0", "queued3")
    }  # a v1 replay of a key handed off before the upgrade still gets the original id
    # "done*" were recorded with other payloads in populate: a conflict, not a new intent
    assert {replays[f"done{i}"] for i in range(4)} == {"IdempotencyConflict"}

    db = Database(db_url)
    with Relay(db) as relay:  # whatever the v1 relay left pending is not stranded
        relay.run()
    with db.connect() as c:
        assert (
            c.execute_sql("SELECT count(*) FROM outbox_messages WHERE state = 'pending'")[0][0] == 0
        )
        queued = [r[0] for r in c.execute_sql("SELECT message_id FROM outbox_jobs")]
        assert len(queued) == len(set(queued))  # nothing handed off twice
        assert {v1_ids[k] for k in keys} <= set(queued)  # nothing lost
        assert {history[f"pending{i}"] for i in range(3)} <= set(queued)
        # Every queued job of the run has exactly one key, and every key one job.
        by_key = c.execute_sql(
            "SELECT count(*) FROM outbox_keys k JOIN outbox_jobs j ON j.message_id = k.message_id"
        )[0][0]
        assert by_key == len(queued)
        # The tombstones v1 left are pruned like any handed-off key.
        admin.prune(c, 0, limit=100_000)
        assert (
            c.execute_sql("SELECT count(*) FROM outbox_messages WHERE state = 'published'")[0][0]
            == 0
        )
