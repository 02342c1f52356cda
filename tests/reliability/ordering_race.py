"""The two sides of the lock-order race (tests/reliability/test_ordering_lock_order.py),
run as processes: ``enter URL N`` pushes N jobs of one ordering key, one transaction
each, and counts the pushes the database refused (deadlock victims); ``dead URL N``
claims the key's job in its turn and dead-letters it, N times; ``cancel URL N`` cancels
the key's job in its turn (``outbox queue cancel``), N times. Each prints
``<role> errors <count>`` at the end."""

from __future__ import annotations

import sys
import time

from outbox import Job, push
from outbox.db.connection import Database
from outbox.db.rows import Failure, JobClaim, JobDeadLetter
from outbox.job import BLOCKED_OFFSET_MS
from outbox.queue.control import cancel
from tests.fixtures.databases import raw_connect

QUEUE, KEY = "race", "order:race"


def enter(url: str, n: int) -> int:
    errors = 0
    conn = raw_connect(url)
    try:
        for i in range(n):
            try:
                push(conn, Job("t.race", {"i": i}, queue=QUEUE, ordering_key=KEY))
                conn.commit()
            except Exception:
                conn.rollback()
                errors += 1
    finally:
        conn.close()
    return errors


def dead(url: str, n: int, timeout: float = 120.0) -> int:
    done, deadline = 0, time.monotonic() + timeout
    with Database(url).connect() as c:
        while done < n and time.monotonic() < deadline:
            for job in c.driver.job_claim(JobClaim(QUEUE, 1, "racer", 60_000)):
                c.driver.job_dead_letter(JobDeadLetter("racer", job, Failure("Race", "", "")))
                done += 1
    return n - done  # jobs it never got to dead-letter


def cancelling(url: str, n: int, timeout: float = 120.0) -> int:
    done, deadline = 0, time.monotonic() + timeout
    turn = (
        "SELECT message_id FROM outbox_jobs WHERE queue = %s AND available_at < %s "
        "ORDER BY id LIMIT 1"
    )
    with Database(url).connect() as c:
        while done < n and time.monotonic() < deadline:
            for (mid,) in c.execute_sql(turn, (QUEUE, BLOCKED_OFFSET_MS)):
                assert cancel(c, str(mid)) == "dead"
                done += 1
    return n - done  # jobs it never got to cancel


if __name__ == "__main__":
    role, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    errors = {"enter": enter, "dead": dead, "cancel": cancelling}[role](url, count)
    print(f"{role} errors {errors}", flush=True)
