"""outbox.queue.push(): a job straight into the queue table, in the caller's transaction."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import Job
from outbox.db.connection import Connection
from outbox.errors import InvalidJob, NoActiveTransaction
from outbox.queue import push
from outbox.queue.push import MAX_DELAY_S
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.records import counts, create_notes, db_now_ms, insert_note

JOB = Job("mail.send", {"to": "user:1", "b": [2, 1]}, queue="mail", max_attempts=4)
JOB_COLUMNS = (
    "message_id, queue, job_name, payload, attempts, max_attempts, available_at, reserved_at,"
    " reserved_by, lease_expires_at, created_at, last_error"
)


@pytest.fixture(autouse=True)
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


def job_rows(conn: Connection) -> list[dict[str, Any]]:
    names = [c.strip() for c in JOB_COLUMNS.split(",")]
    rows = conn.execute_sql(f"SELECT {JOB_COLUMNS} FROM outbox_jobs ORDER BY id")
    return [dict(zip(names, r, strict=True)) for r in rows]


def test_push_commits_with_the_business_write(
    app_conn: Any, conn: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    message_id = push(app_conn, JOB)
    assert counts(conn)["outbox_jobs"] == 0  # not before the caller commits
    app_conn.commit()
    (row,) = job_rows(conn)
    assert uuid.UUID(message_id).version == 7
    assert (row["message_id"], row["queue"], row["job_name"], row["payload"]) == (
        message_id,
        "mail",
        "mail.send",
        '{"b":[2,1],"to":"user:1"}',
    )
    assert (row["attempts"], row["max_attempts"]) == (0, 4)
    assert (row["reserved_at"], row["reserved_by"], row["lease_expires_at"]) == (None,) * 3
    assert row["last_error"] is None
    assert counts(conn)["notes"] == 1
    assert counts(conn)["outbox_messages"] == 0  # no outbox record for a direct push
    ids = [push(app_conn, JOB) for _ in range(3)]  # no key: every push is a new job
    app_conn.commit()
    assert [r["message_id"] for r in job_rows(conn)] == [message_id, *ids]
    assert len({message_id, *ids}) == 4


def test_push_rolls_back_with_the_business_write(
    app_conn: Any, conn: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    push(app_conn, JOB)
    push(app_conn, JOB)
    app_conn.rollback()
    assert counts(conn) == {
        "outbox_messages": 0,
        "outbox_jobs": 0,
        "outbox_failed_jobs": 0,
        "notes": 0,
    }


def test_delay_counts_from_the_database_clock_not_pythons(
    app_conn: Any, conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 946_684_800.0)  # Python thinks it is 2000
    for delay, delay_ms in [(0, 0), (1.5, 1_500), (3_600, 3_600_000)]:
        conn.execute_sql("DELETE FROM outbox_jobs")
        before = db_now_ms(conn)
        push(app_conn, JOB, delay=delay)
        app_conn.commit()
        after = db_now_ms(conn)
        (row,) = job_rows(conn)
        assert before <= row["created_at"] <= after
        assert before + delay_ms <= row["available_at"] <= after + delay_ms


BAD_DELAYS = [
    (-1, f"delay must be between 0 and {MAX_DELAY_S} seconds"),
    (MAX_DELAY_S + 1, f"delay must be between 0 and {MAX_DELAY_S} seconds"),
    (float("nan"), "delay must be a finite number of seconds (got nan)"),
    (float("inf"), "delay must be a finite number of seconds (got inf)"),
    (True, "delay must be a finite number of seconds (got True)"),
    ("5", "delay must be a finite number of seconds (got '5')"),
    (None, "delay must be a finite number of seconds (got None)"),
]


BAD_JOBS = [
    (Job("mail send"), "job name must be"),
    (Job("a", queue="q/1"), "queue name must be"),
    (Job("a", {"x": float("nan")}), "NaN or Infinity"),
    (Job("a", {"x": b"raw"}), "a bytes"),
    (Job("a", max_attempts=0), "max_attempts must be between"),
]


def test_bad_delay_or_job_is_rejected_and_nothing_written(
    app_conn: Any, conn: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    for delay, message in BAD_DELAYS:
        with pytest.raises(InvalidJob) as info:
            push(app_conn, JOB, delay=delay)  # type: ignore[arg-type]
        assert str(info.value) == message
    for job, text in BAD_JOBS:
        with pytest.raises(InvalidJob, match=text):
            push(app_conn, job)
    app_conn.commit()  # the caller's transaction is intact
    assert counts(conn)["outbox_jobs"] == 0 and counts(conn)["notes"] == 1


def test_push_on_a_sqlalchemy_connection_joins_its_transaction(
    db_url: str, conn: Connection
) -> None:
    engine = sa.create_engine(sqlalchemy_url(db_url))
    try:
        with engine.connect() as c:
            push(c, JOB)
            c.rollback()
            assert counts(conn)["outbox_jobs"] == 0
            message_id = push(c, JOB, delay=2)
            c.commit()
        autocommit = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        with autocommit as c, pytest.raises(NoActiveTransaction):
            push(c, JOB)
    finally:
        engine.dispose()
    assert [r["message_id"] for r in job_rows(conn)] == [message_id]
