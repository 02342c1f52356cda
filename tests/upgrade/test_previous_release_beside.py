"""A rolling deploy from the previous release (schema version 2, commit 34b8ded) to this
one: after ``outbox migrate`` brings a database the previous release wrote to the latest
schema, producers, relays and workers of both releases run side by side. Nothing is lost,
handed off twice, run twice or stranded, and both releases deduplicate against each
other's keys. The same actor script drives both releases (``PYTHONPATH`` picks the
package)."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox.db.connection import Database
from outbox.db.migrate import LATEST
from tests.upgrade.test_migration_2 import ROOT, migrate_v2, v1
from tests.upgrade.test_rolling_upgrade import RELAY_BOUND_S, result, start

KEYS = 40


@pytest.mark.slow
def test_previous_release_and_this_one_side_by_side(
    v2_package: Path, db_url: str, tmp_path: Path
) -> None:
    assert v1(v2_package, db_url, "migrate")["applied"] == [1, 2]
    before = v1(v2_package, db_url, "record", "old", "6")["ids"]
    v1(v2_package, db_url, "relay")  # handed off by the previous release: queued jobs
    pending = v1(v2_package, db_url, "record", "waiting", "4")["ids"]  # left pending
    migrated = migrate_v2(db_url)
    out, err = migrated.communicate(timeout=300)
    assert migrated.returncode == 0, err
    assert f"to version {LATEST} (applied {list(range(3, LATEST + 1))})" in out

    # The relays race each other and the producers until every producer is done.
    done_producing = tmp_path / "producers_done"
    relays = {
        name: start(package, db_url, "relay-loop", str(RELAY_BOUND_S), str(done_producing))
        for name, package in (("old_relay", v2_package), ("new_relay", ROOT))
    }
    procs = {
        "old_producer": start(v2_package, db_url, "record", "A", str(KEYS), "B"),
        "new_producer": start(ROOT, db_url, "record", "B", str(KEYS), "A"),
        "old_replay": start(v2_package, db_url, "record", "old", "6"),
    }
    ran = {name: result(p) for name, p in procs.items()}
    done_producing.touch()
    ran |= {name: result(p) for name, p in relays.items()}
    old_ids, new_ids = ran["old_producer"]["ids"], ran["new_producer"]["ids"]
    keys = [f"A{i}" for i in range(KEYS)] + [f"B{i}" for i in range(KEYS)]
    assert all(len(old_ids[k]) == 36 for k in keys), old_ids
    assert {k: old_ids[k] for k in keys} == {k: new_ids[k] for k in keys}  # one intent a key
    assert ran["old_replay"]["ids"] == before  # a replay after the upgrade: the same ids

    v1(ROOT, db_url, "relay")  # whatever is still pending, by this release
    drains = [start(package, db_url, "drain", "upgrade") for package in (v2_package, ROOT)]
    done = [result(p) for p in drains]
    expected = set(before.values()) | set(pending.values()) | {old_ids[k] for k in keys}
    assert sum(d["succeeded"] for d in done) == len(expected)  # each job ran once
    assert all(d["dead"] == 0 for d in done)
    with Database(db_url).connect() as c:
        assert c.execute_sql("SELECT count(*) FROM outbox_messages")[0][0] == 0
        assert c.execute_sql("SELECT count(*) FROM outbox_jobs")[0][0] == 0
        keyed = {r[0] for r in c.execute_sql("SELECT message_id FROM outbox_keys")}
        assert expected <= keyed  # every intent's key is kept for replays
