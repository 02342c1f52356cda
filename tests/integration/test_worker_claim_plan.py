"""The claim stays an index range scan however big the table grows.

PostgreSQL gets 1,000,000 jobs (half due, half delayed, built with one
``INSERT … SELECT generate_series``); SQLite and MariaDB get 20,000, enough for their
planners to prefer an index. A plan regression fails the suite instead of a benchmark.
The jobs spread over all ten priorities and another queue is paused, so the plan is the
one a queue with priorities in use gets: the walk in (priority, available_at, id) order
is the index's own order (no sort), and the pause check is one probe of a small table.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox.db.connection import Connection
from outbox.db.plans import of_ring_slot
from outbox.queue.control import pause
from tests.fixtures.workers import seed_jobs

PARAMS = {"queue": "default", "limit": 100, "worker": "w:1:x", "lease_ms": 30_000}


def _pg_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_pg_nodes(child))
    return out


def _fill(conn: Connection, n: int) -> None:
    seed_jobs(conn, n // 2)
    seed_jobs(conn, n // 2, delay_ms=3_600_000)
    seed_jobs(conn, n // 10, queue="other")
    with conn.transaction():
        conn.execute_sql("UPDATE outbox_jobs SET priority = id % 10")
    _pause_other(conn)


def _pause_other(conn: Connection) -> None:
    pause(conn, "other")


def _fill_pg(conn: Connection, n: int) -> None:
    """One statement; ordered ids keep the unique index cheap to build."""
    conn.execute_sql(
        "INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts, "
        "available_at, created_at, priority) "
        "SELECT 'm' || lpad(g::text, 12, '0'), "
        "CASE WHEN g %% 10 = 0 THEN 'other' ELSE 'default' END, "
        "'t.noop', '{}', 0, n.ms + CASE WHEN g %% 2 = 0 THEN 3600000 ELSE 0 END, n.ms, "
        "(g / 7) %% 10 "
        "FROM generate_series(1, %(n)s) g, "
        "(SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) n",
        {"n": n},
    )


@pytest.mark.slow
def test_claim_uses_the_claim_index(conn: Connection) -> None:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        _fill_pg(conn, 1_000_000)
        _pause_other(conn)
        conn.execute_sql("ANALYZE outbox_jobs")
        sql = conn.statement("job_claim").driver
        (row,) = conn.execute_sql(f"EXPLAIN (FORMAT JSON) {sql}", PARAMS)
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        nodes = _pg_nodes(plan[0]["Plan"])
        scans = {
            (n["Node Type"], of_ring_slot(n.get("Index Name")))  # the ring's slot: its table's
            for n in nodes
            if "Scan" in n["Node Type"]
        }
        assert ("Index Scan", "outbox_jobs_claim") in scans, scans
        # A sequential scan may only read outbox_paused_queues (a few rows at most).
        tables = {
            of_ring_slot(n.get("Relation Name")) for n in nodes if n["Node Type"] == "Seq Scan"
        }
        assert tables <= {"outbox_paused_queues"}, scans
        assert not any(n["Node Type"] == "Sort" for n in nodes)
    elif dialect == "sqlite":
        _fill(conn, 20_000)
        conn.execute_sql("ANALYZE")
        sql = conn.statement("job_claim").driver
        detail = " | ".join(
            str(r[-1]) for r in conn.execute_sql(f"EXPLAIN QUERY PLAN {sql}", PARAMS)
        )
        assert "USING INDEX outbox_jobs_claim" in detail, detail
        assert "TEMP B-TREE" not in detail, detail
    else:
        _fill(conn, 20_000)
        conn.execute_sql("ANALYZE TABLE outbox_jobs")
        sql = conn.statement("job_claim_pick").driver.replace("FOR UPDATE SKIP LOCKED", "")
        rows = conn.execute_sql(f"EXPLAIN {sql}", PARAMS)
        (key,) = [r[5] for r in rows if r[2] == "outbox_jobs"]
        assert all(r[5] == "PRIMARY" for r in rows if r[2] == "p"), rows  # the pause probe
        extra = " ".join(str(r[-1]) for r in rows)
        assert key == "outbox_jobs_claim", rows
        assert "filesort" not in extra, rows
