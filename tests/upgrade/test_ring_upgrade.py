"""The ring storage installed in place on a schema-12 database holding jobs in every
state (``OUTBOX_QUEUE_STORAGE=ring``, then ``migrate``): every row is still there with
every column as it was, a worker that held a job before still settles it with the same
fence, and workers of the release before the ring (commit ``BASE_COMMIT``: they know
nothing of slots, and claim through the parent, whose one attached partition is the
current slot) drain the queue beside this release's: each job runs once, none is stranded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox import Job, Relay, Workflow, record
from outbox.config import settings
from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.queue import push
from tests.fixtures.factories import count_rows
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.queue_ops import Failure, ack, claim, dead_letter, release
from tests.upgrade.conftest import _exported
from tests.upgrade.test_rolling_upgrade import result, start

BASE_COMMIT = "8202407"  # the last commit before the ring storage (schema 12)
QUEUE = "upgrade"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def base_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _exported(BASE_COMMIT, tmp_path_factory.mktemp("outbox_base"))


def _jobs(conn: Connection) -> list[tuple[Any, ...]]:
    """Every job row, every column but the ring's own (slot), in id order."""
    columns = [
        str(r[0]) for r in conn.execute_sql(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'outbox_jobs' AND table_schema = current_schema()"
            " AND column_name <> 'slot' ORDER BY ordinal_position")
    ]
    return [tuple(r) for r in conn.execute_sql(
        f"SELECT {', '.join(columns)} FROM outbox_jobs ORDER BY id")]


def _every_state(database: Database, conn: Connection) -> dict[str, Any]:
    """Ready, delayed, running, retrying and dead jobs; keyed jobs (one in its turn, one
    blocked behind it); a workflow whose second node waits for its first."""
    app = database.connect()
    try:
        app.transact(lambda t: [push(t.raw, Job("upgrade.echo", {"n": i}, queue=QUEUE))
                                for i in range(3)], operation="test")
        app.transact(lambda t: push(t.raw, Job("upgrade.echo", {"n": "later"}, queue=QUEUE),
                                    delay=3600), operation="test")
        for i in range(3):
            app.transact(lambda t, i=i: push(t.raw, Job("upgrade.echo", {"h": i}, queue="held")),
                         operation="test")
        for i in range(2):
            app.transact(lambda t, i=i: record(
                t.raw, f"keyed:{i}", Job("upgrade.echo", {"k": i}, queue=QUEUE,
                                         ordering_key="acct-1")), operation="test")
        wf = Workflow("upgrade:wf")
        first = wf.add(Job("upgrade.echo", {"wf": "a"}, queue=QUEUE), name="a")
        wf.add(Job("upgrade.echo", {"wf": "b"}, queue=QUEUE), name="b", after=[first])
        app.transact(lambda t: record(t.raw, "upgrade:wf", wf), operation="test")
    finally:
        app.close()
    with Relay(database) as relay:
        relay.run_once()
    running, retrying, dead = claim(conn, "held", 3, "old-worker", 600_000)
    assert release(conn, "old-worker", retrying, 3_600_000, "RuntimeError")
    assert dead_letter(conn, "old-worker", dead, Failure("RuntimeError", "boom", ""))
    return {"running": running}


def _heap_database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Database:
    """The empty ``db_url`` migrated as the release before the ring left it: the heap
    (``OUTBOX_QUEUE_STORAGE=heap``, whatever the default)."""
    monkeypatch.setattr(settings, "queue_storage", "heap")
    database = Database(db_url)
    with database.connect() as c:
        migrate(c)
        assert c.execute_sql("SELECT relkind FROM pg_class"
                             " WHERE oid = CAST('outbox_jobs' AS regclass)") == [("r",)]
    return database


@pytest.mark.slow
def test_every_state_survives_the_ring_conversion_and_both_releases_drain_it(
    backend: str, db_url: str, base_package: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    database = _heap_database(db_url, monkeypatch)
    conn = database.connect()
    try:
        _convert_and_drain(database, conn, db_url, base_package, monkeypatch)
    finally:
        conn.close()


def _convert_and_drain(
    database: Database, conn: Connection, db_url: str, base_package: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = _every_state(database, conn)
    before = _jobs(conn)
    others = {t: count_rows(conn, t) for t in
              ("outbox_failed_jobs", "outbox_workflow_nodes", "outbox_messages")}
    assert len(before) == 3 + 1 + 3 - 1 + 2 + 1  # ready, delayed, held less the dead, keyed, root

    monkeypatch.setattr(settings, "queue_storage", "ring")
    with database.connect() as fresh:
        assert migrate(fresh) == []  # no numbered migration: the storage only
        assert fresh.execute_sql(
            "SELECT relkind FROM pg_class WHERE oid = CAST('outbox_jobs' AS regclass)"
        ) == [("p",)]
        assert _jobs(fresh) == before
        assert {t: count_rows(fresh, t) for t in others} == others
        assert migrate(fresh) == [] and _jobs(fresh) == before  # a second run changes nothing
        # the worker that held a job before the conversion settles it with the same fence
        assert ack(fresh, "old-worker", [held["running"]]) == {held["running"].id}
        fresh.execute_sql("UPDATE outbox_jobs SET available_at = 0"
                          " WHERE available_at < 1000000000000000")  # due now: delayed, retrying
        fresh.execute_sql("UPDATE outbox_jobs SET queue = %s WHERE queue = 'held'", (QUEUE,))
        fresh.execute_sql("SELECT outbox_ring_rotate(0, 0, 5000, '1s')")  # one rotation first

    drains = [start(package, db_url, "drain", QUEUE) for package in (base_package, ROOT)]
    done = [result(p) for p in drains]
    # 3 ready + 1 delayed + 1 retrying + 2 keyed + 2 workflow nodes, each once
    assert sum(d["succeeded"] for d in done) == 9, done
    assert all(d["dead"] == 0 for d in done)
    assert count_rows(conn, "outbox_jobs") == 0
    assert count_rows(conn, "outbox_failed_jobs") == 1


def _outbox_migrate(db_url: str, storage: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OUTBOX_QUEUE_STORAGE"}
    if storage is not None:
        env["OUTBOX_QUEUE_STORAGE"] = storage
    done = subprocess.run([sys.executable, "-m", "outbox", "--database-url", db_url, "migrate"],
                          env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _relkind(db_url: str) -> str:
    with Database(db_url).connect() as c:
        return str(c.execute_sql(
            "SELECT relkind FROM pg_class WHERE oid = CAST('outbox_jobs' AS regclass)")[0][0])


def test_outbox_migrate_makes_the_ring_unless_the_heap_is_asked_for(
    backend: str, db_url: str
) -> None:
    """The CLI's ``outbox migrate``: the heap while ``OUTBOX_QUEUE_STORAGE=heap`` asks
    for it, the ring by default, converting that heap in place, rows and all, and a ring
    stays a ring."""
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    _outbox_migrate(db_url, "heap")
    assert _relkind(db_url) == "r"
    _outbox_migrate(db_url, "heap")
    assert _relkind(db_url) == "r"
    with psycopg.connect(db_url) as app:
        push(app, Job("upgrade.echo", {"n": 1}, queue=QUEUE))
        app.commit()
    _outbox_migrate(db_url, None)
    assert _relkind(db_url) == "p"
    with Database(db_url).connect() as c:
        assert count_rows(c, "outbox_jobs") == 1
        assert c.execute_sql("SELECT slot, rotations FROM outbox_queue_ring") == [(0, 0)]
    _outbox_migrate(db_url, "heap")  # a ring stays a ring
    assert _relkind(db_url) == "p"


def _attached(conn: Connection) -> list[str]:
    return sorted(str(r[0]) for r in conn.execute_sql(
        "SELECT CAST(relid AS regclass) FROM pg_partition_tree('outbox_jobs') WHERE isleaf"))


def test_a_later_migration_reaches_the_next_slot_and_rotation_goes_on(
    backend: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the current slot is attached, and a rotation makes the next slot from the
    parent's definition at that time (ADR 5): a numbered migration after the ring (here
    a column and an index, as the next migration file would add) reaches the current
    slot through the parent and every later slot through its definition, so rotation
    goes on; the slot a rotation left is dropped by the next pass."""
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    from outbox.db import migrate as runner

    monkeypatch.setattr(settings, "queue_storage", "ring")
    with Database(db_url).connect() as conn:
        migrate(conn)
        assert _attached(conn) == ["outbox_jobs_ring_0"]
        later = runner.Migration(runner.LATEST + 1, "test later column", lambda _d: [
            "ALTER TABLE outbox_jobs ADD COLUMN later_note TEXT",
            "CREATE INDEX outbox_jobs_later ON outbox_jobs (later_note)",
        ])
        monkeypatch.setattr(runner, "MIGRATIONS", (*runner.MIGRATIONS, later))
        assert migrate(conn) == [runner.LATEST + 1]
        assert _attached(conn) == ["outbox_jobs_ring_0"]
        conn.transact(lambda t: push(t.raw, Job("upgrade.echo", {"n": 1}, queue=QUEUE)),
                      operation="test")
        assert conn.execute_sql(
            "SELECT outbox_ring_rotate(0, 0, 5000, '1s')") == [("rotated",)]
        assert _attached(conn) == ["outbox_jobs_ring_1"]
        assert conn.execute_sql(
            "SELECT count(*), min(tableoid::regclass::text) FROM outbox_jobs"
            " WHERE later_note IS NULL") == [(1, "outbox_jobs_ring_1")]
        assert conn.execute_sql(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'outbox_jobs_ring_1'"
            " AND indexdef LIKE '%later_note%'") == [("outbox_jobs_later_ring_1",)]
        assert conn.execute_sql(
            "SELECT outbox_ring_rotate(0, 0, 5000, '1s')") == [("rotated",)]
        assert _attached(conn) == ["outbox_jobs_ring_2"]
        assert conn.execute_sql(  # the second pass dropped the slot the first left
            "SELECT to_regclass('outbox_jobs_ring_0') IS NULL") == [(True,)]
