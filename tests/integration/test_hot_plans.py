"""Every hot statement reaches its rows through its index, on every backend.

The statements and their indexes are one table, ``outbox.db.plans.HOT``: a new hot
statement is one more row there. Each backend's database is filled once for this module
(``plans.seed``: one set-based INSERT per table, 200,000 intents, 200,000 jobs,
400,000 key rows, and 200,000 rate-limit starts, 20,000 slots and 20,000 waiting jobs
over 2,000 limited keys) and every row of the table is planned against it. A planner
regression, a dropped index or a statement rewritten so that it scans fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from outbox.db import plans
from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from tests.fixtures import databases as backends

ROWS = 200_000
# One xdist worker takes the module, so each backend is seeded once per run, not once
# per worker (a seed is ~30 s of 200,000-row inserts on this machine).
pytestmark = pytest.mark.xdist_group("hot_plans")
CASES = [(b, h) for b in backends.BACKENDS for h in plans.HOT if b in h.dialects]


class Seeded:
    """One seeded database per backend, made on first use and shared by the module
    (a parametrized module fixture would be rebuilt for every case)."""

    def __init__(self, servers: dict[str, Any], tmp: pytest.TempPathFactory) -> None:
        self._servers, self._tmp = servers, tmp
        self._made: dict[str, tuple[Connection, str]] = {}

    def conn(self, backend: str) -> Connection:
        if backend not in self._made:
            run = self._servers.get(backend)
            url = backends.sqlite_url(self._tmp.mktemp("plans")) if run is None else run.new_url()
            conn = Database(url).connect()
            self._made[backend] = (conn, url)
            migrate(conn)
            plans.seed(conn, ROWS)
        return self._made[backend][0]

    def close(self) -> None:
        for backend, (conn, url) in self._made.items():
            conn.close()
            run = self._servers.get(backend)
            if run is not None:
                run.drop_url(url)


@pytest.fixture(scope="module")
def seeded(_servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    made = Seeded(_servers, tmp_path_factory)
    yield made
    made.close()


@pytest.mark.parametrize(
    ("backend", "hot"), CASES, ids=[f"{b}-{h.statement}-{h.index}" for b, h in CASES]
)
@pytest.mark.slow
def test_hot_statement_uses_its_index(seeded: Seeded, backend: str, hot: plans.Hot) -> None:
    conn = seeded.conn(backend)
    accesses = plans.explain(conn, hot.statement, hot.params)
    assert plans.check(accesses, hot, backend) is None, accesses


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_the_big_tables_hold_at_least_200k_rows(seeded: Seeded, backend: str) -> None:
    conn = seeded.conn(backend)
    for table in plans.BIG_TABLES:
        (row,) = conn.execute_sql(f"SELECT count(*) FROM {table}")
        assert int(row[0]) >= ROWS, table


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_the_limit_tables_hold_their_seeded_rows(seeded: Seeded, backend: str) -> None:
    """Thousands of keys, a window of starts, running slots and waiting jobs each: a
    statement that reads the limits of every key instead of one shows in its plan."""
    conn = seeded.conn(backend)
    sizes = {
        "outbox_limits": ROWS // 100,
        "outbox_limit_starts": ROWS,
        "outbox_limit_slots": ROWS // 10,
        "outbox_limit_waits": ROWS // 10,
    }
    for table, n in sizes.items():
        (row,) = conn.execute_sql(f"SELECT count(*) FROM {table}")
        assert int(row[0]) == n, table
    (row,) = conn.execute_sql("SELECT count(DISTINCT priority) FROM outbox_jobs")
    assert int(row[0]) == 10


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_the_workflow_tables_hold_their_seeded_rows(seeded: Seeded, backend: str) -> None:
    """Workflows of 1,000 nodes (today's largest), one node per queued job, each
    workflow's fan-out edges: `outbox workflow show` must read one workflow's share,
    and look each node's job up (never hash the whole queue)."""
    conn = seeded.conn(backend)
    sizes = {
        "outbox_workflows": ROWS,
        "outbox_workflow_nodes": ROWS,
        "outbox_workflow_edges": ROWS - ROWS // 1000,
    }
    for table, n in sizes.items():
        (row,) = conn.execute_sql(f"SELECT count(*) FROM {table}")
        assert int(row[0]) == n, table


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_a_statement_that_scans_is_caught(seeded: Seeded, backend: str) -> None:
    """The check is not blind: a read by a column no index leads with is a full scan,
    of a big table or of a limits table."""
    hot = plans.Hot("plan_probe_scan", {}, "outbox_jobs", "outbox_jobs_claim")
    accesses = plans.explain(seeded.conn(backend), hot.statement, hot.params)
    assert plans.check(accesses, hot, backend) == "full scan of outbox_jobs"
    slots = plans.Hot("plan_probe_limit_scan", {}, "outbox_limit_slots", "outbox_limit_slots_pkey")
    accesses = plans.explain(seeded.conn(backend), slots.statement, slots.params)
    assert plans.check(accesses, slots, backend) == "full scan of outbox_limit_slots"


def test_every_dialect_covers_the_same_hot_operations() -> None:
    """A statement one dialect splits in two (MariaDB's pick-then-mark claim) or folds
    into one (PostgreSQL's relay handoff) still has each hot operation checked there."""
    needed = (
        "relay claim",
        "relay move",
        "worker claim",
        "ack",
        "heartbeat",
        "release",
        "dead-letter",
        "reap scan",
        "prune keys",
        "prune tombstones",
        "status:",
        "outbox failed",
        "record: key lookup",
        "heartbeat: cancel flags",
        "snooze",
        "cancel: waiting job",
        "cancel: held job",
        "resume",
        "paused queues",
        "limit: lock key",
        "limit slot: clear expired",
        "limit slot: count",
        "limit slot: free",
        "limit slot: renew",
        "limit start: prune",
        "limit start: count",
        "limit start: nth oldest",
        "limit start: nth latest",
        "limit start: ticket",
        "limit start: drop ticket",
        "limit wait: first",
        "limit wait: drop",
        "limit wake",
        "limit: job waits",
        "limit: job returned",
    )
    for dialect in plans.ALL:
        whats = [h.what for h in plans.HOT if dialect in h.dialects]
        missing = [n for n in needed if not any(n in w for w in whats)]
        assert not missing, (dialect, missing)
