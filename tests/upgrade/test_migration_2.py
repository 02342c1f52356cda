"""Migration 2 on a version-1 database holding rows in every state, on every backend,
run by two ``outbox migrate`` processes at once: nothing recorded before the upgrade is
lost or handed off twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from outbox import Job, record
from outbox.db.connection import Connection, Database
from outbox.db.migrate import CONTRACT, HELD_BACK_STEPS, LATEST, SCHEMA_1_WINDOW_MS, version_of
from outbox.errors import IdempotencyConflict
from outbox.relay import Relay
from tests.fixtures.databases import raw_connect

ACTOR = Path(__file__).with_name("v1_actor.py")
ROOT = Path(__file__).resolve().parents[2]


def v1(v1_package: Path, url: str, *args: str) -> dict[str, Any]:
    """Run the version-1 actor; its one JSON line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(v1_package), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, str(ACTOR), url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def migrate_v2(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "outbox", "--database-url", url, "migrate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def table(conn: Connection, sql: str) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in conn.execute_sql(sql)}


def test_migration_2_keeps_every_v1_intent_and_hands_nothing_off_twice(
    v1_package: Path, db_url: str
) -> None:
    assert v1(v1_package, db_url, "migrate")["applied"] == [1]
    ids: dict[str, str] = v1(v1_package, db_url, "populate")["ids"]
    db = Database(db_url)
    with db.connect() as c:
        messages = c.execute_sql(
            "SELECT message_id, key_digest, fingerprint, state, created_at FROM outbox_messages"
        )
        jobs_before = table(c, "SELECT message_id, queue, payload FROM outbox_jobs")
        dead_before = table(c, "SELECT message_id, exception_class FROM outbox_failed_jobs")
    states = {m: s for m, _, _, s, _ in messages}
    assert sorted(states.values()).count("published") == 10
    assert sorted(states.values()).count("pending") == 3
    assert list(states.values()).count("failed") == 1

    racing = [migrate_v2(db_url), migrate_v2(db_url)]
    outputs = [p.communicate(timeout=300) for p in racing]
    assert [p.returncode for p in racing] == [0, 0], outputs
    said = sorted(out for out, _ in outputs)
    # One applied it; the other waited for the lock, then found nothing to do. Both hold
    # the contract step back: the v1 intents are recent.
    contract = version_of(CONTRACT)
    held = [version_of(step) for step in HELD_BACK_STEPS]
    applied = [v for v in range(2, LATEST + 1) if v not in held]  # all but the held-back
    assert said[0].startswith("migrated "), said
    assert f"to version {applied[-1]} (applied {applied})" in said[0], said
    assert all(f"migration {contract} ({CONTRACT}) and migration" in out for out in said), said
    assert all("are held back" in out for out in said), said

    with db.connect() as c:
        keys = table(c, "SELECT key_digest, message_id, fingerprint, created_at FROM outbox_keys")
        assert keys == {(k, m, f, at) for m, k, f, _, at in messages}  # every v1 intent
        left = table(c, "SELECT message_id, state FROM outbox_messages")
        assert left == {(m, s) for m, s in states.items() if s != "published"}
        assert table(c, "SELECT message_id, queue, payload FROM outbox_jobs") == jobs_before
        assert table(c, "SELECT message_id, exception_class FROM outbox_failed_jobs") == dead_before

    # A replay of a v1 key with the same job gets its v1 id, handed off or not; another job
    # under the key is a conflict.
    app = raw_connect(db_url)
    try:
        assert record(app, "queued0", v1_job("queued0")) == ids["queued0"]
        assert record(app, "pending1", v1_job("pending1")) == ids["pending1"]
        with pytest.raises(IdempotencyConflict):
            record(app, "done2", Job("upgrade.echo", {"i": 99}, queue="ran"))
        app.rollback()
    finally:
        app.close()

    with Relay(db) as relay:
        assert relay.run().handed_off == 3  # the v1 pending ones, once
    with db.connect() as c:
        queued = [r[0] for r in c.execute_sql("SELECT message_id FROM outbox_jobs")]
        assert len(queued) == len(set(queued)) == len(jobs_before) + 3
        assert {ids[f"pending{i}"] for i in range(3)} <= set(queued)
        assert table(c, "SELECT message_id, state FROM outbox_messages") == {
            (ids["bad0"], "failed")
        }

    # The quarantined v1 intent is still a recent trace; once a day has passed (moved
    # back here, rather than waited for), the contract step goes in, and the database is
    # at the newest version.
    assert "held back" in migrated_output(db_url)
    with db.connect() as c:
        c.execute_sql(f"UPDATE outbox_messages SET created_at = created_at - {SCHEMA_1_WINDOW_MS}")
    said_last = migrated_output(db_url)
    assert f"to version {LATEST} (applied {held})" in said_last
    assert f"is up to date (version {LATEST})" in migrated_output(db_url)
    app = raw_connect(db_url)
    try:  # a replay of a v1 key after the contract step still finds its v1 id
        assert record(app, "queued0", v1_job("queued0")) == ids["queued0"]
        app.rollback()
    finally:
        app.close()


def migrated_output(url: str) -> str:
    proc = migrate_v2(url)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out


def v1_job(key: str) -> Job:
    return Job("upgrade.echo", {"key": key}, queue="upgrade")
