"""The row factories on every backend: each row they make is one the product's own code
reads as its own (the claim takes a made job, the relay hands off a made intent, the
dead-letter listing and `outbox queue failed` show a made dead letter, record() replays
against a made key, the gate counts made slots and starts, prune clears made leftovers).
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from outbox import Job, record
from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.db.rows import LimitAdmit, LimitAsk, LimitScope, LimitSlot
from outbox.errors import IdempotencyConflict
from outbox.queue import admin as queue_admin
from outbox.queue import limits
from outbox.relay import Relay, RelayConfig
from outbox.relay import admin as relay_admin
from tests.fixtures import queue_ops as ops
from tests.fixtures.databases import db_now_ms, placeholder
from tests.fixtures.factories import Rows, count_rows, insert, make_job

W1 = "host:1:aaaa"
LEASE_MS = 30_000
HOUR_MS = 3_600_000
TABLES = ("outbox_messages", "outbox_keys", "outbox_jobs", "outbox_failed_jobs", "outbox_limits",
          "outbox_limit_starts", "outbox_limit_slots", "outbox_limit_waits")  # fmt: skip


def _relay(database: Database, *, in_python: bool = False) -> Any:
    with Relay(database, RelayConfig(verify_in_python=in_python)) as relay:
        return relay.run_once()


def test_a_made_job_is_claimed_by_the_workers_claim_and_a_delayed_one_is_not(
    conn: Connection, rows: Rows
) -> None:
    due = rows.job(payload='{"n": 1}')
    rows.job(available_at=db_now_ms(conn) + HOUR_MS)
    claimed = ops.claim(conn, "default", 10, W1, LEASE_MS)
    assert [(j.id, j.job_name, j.payload, j.attempts) for j in claimed] == [
        (due, "t.noop", '{"n": 1}', 1)
    ]
    assert rows.count("outbox_jobs", "reserved_by IS NULL") == 1


def test_a_made_job_on_another_queue_is_listed_there(conn: Connection, rows: Rows) -> None:
    rows.job(queue="q2", job_name="t.other", priority=4)
    [listed] = queue_admin.jobs(conn, queue="q2")
    assert (listed.job_name, listed.priority, listed.reserved_by) == ("t.other", 4, None)
    assert queue_admin.jobs(conn, queue="default") == []


@pytest.mark.parametrize("in_python", [False, True], ids=["sql_verify", "python_verify"])
def test_a_made_intent_verifies_and_the_relay_hands_it_off(
    database: Database, conn: Connection, rows: Rows, in_python: bool
) -> None:
    plain = rows.intent()
    sealed = rows.intent(queue="q2", payload='{"a":1}', max_attempts=3, priority=5,
                         available_at=1_000)  # fmt: skip
    batch = _relay(database, in_python=in_python)
    assert (batch.claimed, batch.handed_off, dict(batch.quarantined_ids)) == (2, 2, {})
    jobs = conn.execute_sql("SELECT message_id, queue, max_attempts, priority FROM outbox_jobs")
    assert sorted(map(tuple, jobs)) == sorted([(plain, "default", None, 0), (sealed, "q2", 3, 5)])
    assert rows.count("outbox_messages") == 0 and rows.count("outbox_keys") == 2


def test_a_made_intent_keeps_a_broken_column_and_is_quarantined(
    database: Database, rows: Rows
) -> None:
    broken = rows.intent(fingerprint="0" * 64)
    assert dict(_relay(database).quarantined_ids) == {broken: "fingerprint_mismatch"}
    assert [f.message_id for f in relay_admin.failed(rows.conn)] == [broken]


def test_a_made_intent_holds_its_key_against_record(rows: Rows, app_conn: Any) -> None:
    mid = rows.intent(key="k:1")
    assert record(app_conn, "k:1", Job("t.noop", {})) == mid
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k:1", Job("t.noop", {"other": 1}))


def test_a_made_key_deduplicates_record_until_prune_removes_it(
    conn: Connection, rows: Rows, app_conn: Any
) -> None:
    mid = rows.key(key="k:gone", created_at=db_now_ms(conn) - 2 * 86_400_000)
    assert record(app_conn, "k:gone", Job("t.noop", {})) == mid
    app_conn.commit()
    assert relay_admin.prune(conn, 1) == 1
    assert rows.count("outbox_keys") == 0


def test_a_made_dead_letter_is_listed_shown_and_retried(
    db_url: str, conn: Connection, rows: Rows
) -> None:
    mid = rows.dead_letter(queue="q3", exception_class="ValueError", attempts=3)
    [listed] = queue_admin.failed(conn)
    assert (listed.message_id, listed.queue, listed.exception_class, listed.attempts) == (
        mid, "q3", "ValueError", 3)  # fmt: skip
    shown = CliRunner().invoke(main, ["--database-url", db_url, "queue", "failed"])
    assert shown.exit_code == 0, shown.output
    assert mid in shown.stdout and "ValueError" in shown.stdout
    assert queue_admin.retry(conn, mid) == 1
    assert [j.message_id for j in ops.claim(conn, "q3", 10, W1, LEASE_MS)] == [mid]


def _admit(conn: Connection, scope: LimitScope) -> bool:
    [job] = ops.claim(conn, "default", 1, W1, LEASE_MS)
    [verdict] = conn.driver.limit_admit(LimitAdmit(W1, LEASE_MS, 10, [LimitAsk(job, (scope,))]))
    return bool(verdict.admitted)


def test_a_made_slot_is_counted_by_the_concurrency_limit(conn: Connection, rows: Rows) -> None:
    key = rows.limit()
    rows.limit_slot(key, rows.job(available_at=db_now_ms(conn) + HOUR_MS))
    rows.job()
    assert not _admit(conn, LimitScope(key, concurrency=1))
    assert rows.count("outbox_limit_waits", f"limit_key = '{key}'") == 1


def test_a_made_start_is_counted_by_the_rate_limit(conn: Connection, rows: Rows) -> None:
    key = rows.limit()
    rows.limit_start(key)
    rows.job()
    assert not _admit(conn, LimitScope(key, rate=1, window_ms=60_000))
    fresh = rows.limit()
    rows.job()
    assert _admit(conn, LimitScope(fresh, rate=1, window_ms=60_000))


def test_a_made_wait_is_woken_when_the_slot_it_waits_for_is_freed(
    conn: Connection, rows: Rows
) -> None:
    key = rows.limit()
    rows.job()
    [running] = ops.claim(conn, "default", 1, W1, LEASE_MS)
    rows.limit_slot(key, running.id, holder=W1, attempts=running.attempts)
    later = db_now_ms(conn) + HOUR_MS
    waiting = rows.job(available_at=later)
    rows.limit_wait(key, waiting)
    assert conn.driver.limit_release(W1, [LimitSlot(key, running)]) == 1
    assert rows.count("outbox_jobs", f"id = {waiting} AND available_at < {later}") == 1


def test_made_limit_leftovers_are_pruned(conn: Connection, rows: Rows) -> None:
    old = db_now_ms(conn) - 2 * HOUR_MS
    idle = rows.limit(created_at=old)
    rows.limit_start(idle, started_at=old)
    gone = make_job(conn)
    rows.limit_wait(idle, gone)
    conn.execute_sql(f"DELETE FROM outbox_jobs WHERE id = {gone}")
    busy = rows.limit(created_at=old)
    rows.limit_slot(busy, rows.job())
    assert limits.prune(conn.driver) == 1
    assert [r[0] for r in conn.execute_sql("SELECT limit_key FROM outbox_limits")] == [busy]
    assert count_rows(conn, "outbox_limit_starts") == count_rows(conn, "outbox_limit_waits") == 0


def test_every_factory_fills_every_not_null_column_by_itself(rows: Rows) -> None:
    """Called bare (only the keys a row links to): the database's NOT NULL checks (MariaDB
    in strict mode) are what would refuse a missing default."""
    rows.intent()
    rows.key()
    job = rows.job()
    rows.dead_letter()
    key = rows.limit()
    rows.limit_start(key)
    rows.limit_slot(key, job)
    rows.limit_wait(key, job)
    made = {t: rows.count(t) for t in TABLES}
    assert made == {"outbox_messages": 1, "outbox_keys": 2, "outbox_jobs": 1,
                    "outbox_failed_jobs": 1, "outbox_limits": 1, "outbox_limit_starts": 1,
                    "outbox_limit_slots": 1, "outbox_limit_waits": 1}  # fmt: skip


def test_insert_refuses_a_column_the_table_does_not_have(conn: Connection) -> None:
    with pytest.raises(TypeError, match="outbox_jobs has no column reserverd_by"):
        insert(conn, "outbox_jobs", reserverd_by="w1")
    assert count_rows(conn, "outbox_jobs") == 0


def test_count_rows_takes_the_dialects_placeholder(conn: Connection, rows: Rows) -> None:
    rows.job(queue="q1")
    rows.job(queue="q2")
    assert count_rows(conn, "outbox_jobs", f"queue = {placeholder(conn)}", ["q2"]) == 1
    assert rows.count("outbox_jobs") == 2
