"""Raw-SQL baselines on the outbox's own tables: what the database alone can do.

The raw move deletes intents and inserts queue rows in one statement per batch (no
verification): exactly the rows the relay writes under schema v2 (key rows stay). The
raw claim deletes due jobs 100 at a time and reads their payloads into Python. Both run
on their own database with the same schema and indexes as ours, so the difference is
what our relay and worker add.

Two diagnostics sit between those baselines and the product: the product's own
``relay_handoff`` statement in a bare loop (the move plus verification in SQL, without
the relay's Python), and a claim that writes a lease and deletes the previous batch in
the same statement (what at-least-once with leases requires of the worker, still
without a handler). They show how much of a gap is the SQL's and how much is ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.data import connect


def _queue_rows_from(source: str) -> str:
    """The INSERT both moves end with: queue rows from ``source``'s intents, due now."""
    return f"""
INSERT INTO outbox_jobs
    (message_id, queue, job_name, payload, attempts, max_attempts, available_at, created_at)
SELECT message_id, queue, job_name, payload, 0, max_attempts,
       (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       (extract(epoch FROM clock_timestamp()) * 1000)::bigint
FROM {source}
"""


MOVE = """
WITH batch AS (
    SELECT id FROM outbox_messages WHERE state = 'pending' ORDER BY id LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM outbox_messages m USING batch b WHERE m.id = b.id
    RETURNING m.message_id, m.queue, m.job_name, m.payload, m.max_attempts
)
""" + _queue_rows_from("moved")

CLAIM_DELETE = """
DELETE FROM outbox_jobs WHERE id IN (
    SELECT id FROM outbox_jobs
    WHERE queue = %(queue)s
      AND available_at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    ORDER BY id LIMIT %(n)s FOR UPDATE SKIP LOCKED
) RETURNING id, job_name, payload
"""

CLAIM_LEASE = """
WITH done AS (
    DELETE FROM outbox_jobs WHERE id = ANY(%(done)s) AND reserved_by = 'raw'
)
UPDATE outbox_jobs SET attempts = attempts + 1, reserved_by = 'raw',
    reserved_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
    lease_expires_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 30000
WHERE id IN (
    SELECT id FROM outbox_jobs
    WHERE queue = %(queue)s AND reserved_by IS NULL
      AND available_at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    ORDER BY priority, available_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
) RETURNING id, job_name, payload
"""


def move(url: str, batch: int) -> Callable[[], dict[str, Any]]:
    conn = connect(url, migrate=False)
    sql = MOVE

    def work() -> dict[str, Any]:
        total = 0
        while True:
            with conn.raw.cursor() as cur:  # autocommit: one statement, one transaction
                cur.execute(sql, {"n": batch})
                moved = cur.rowcount
            if moved <= 0:
                return {"count": total}
            total += moved

    return work


def handoff_statement(url: str, batch: int) -> Callable[[], dict[str, Any]]:
    """The relay's one-statement batch (PostgreSQL), as the relay runs it, in a bare loop."""
    from outbox.relay.service import RelayConfig

    conn = connect(url, migrate=False)
    sql = conn.statement("relay_handoff").driver
    params = {"batch_size": batch, "notify": RelayConfig().notify}

    def work() -> dict[str, Any]:
        total = 0
        while True:
            with conn.raw.cursor() as cur:  # autocommit: one statement, one transaction
                cur.execute(sql, params)
                claimed, handed_off = cur.fetchone()[:2]
            if not claimed:
                return {"count": total}
            total += int(handed_off)

    return work


def claim_delete(url: str, batch: int, queue: str) -> Callable[[], dict[str, Any]]:
    conn = connect(url, migrate=False)

    def work() -> dict[str, Any]:
        total = 0
        while True:
            with conn.raw.cursor() as cur:
                cur.execute(CLAIM_DELETE, {"n": batch, "queue": queue})
                rows = cur.fetchall()
            if not rows:
                return {"count": total}
            total += len(rows)

    return work


def claim_lease_delete(url: str, batch: int, queue: str) -> Callable[[], dict[str, Any]]:
    """Claim with a lease, deleting the previous batch in the same statement."""
    conn = connect(url, migrate=False)

    def work() -> dict[str, Any]:
        total = 0
        done: list[int] = []
        while True:
            with conn.raw.cursor() as cur:
                cur.execute(CLAIM_LEASE, {"n": batch, "queue": queue, "done": done})
                rows = cur.fetchall()
            if not rows:
                return {"count": total}
            done = [r[0] for r in rows]
            total += len(rows)

    return work
