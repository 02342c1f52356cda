"""record() on every backend through a plain DB-API connection, as an application uses it.

Each test gets its own empty, migrated database (``app_conn`` is the application's
connection, ``conn`` our own, which sees only committed rows).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from outbox import Job, record
from outbox.db.connection import Connection
from outbox.errors import IdempotencyConflict, InvalidJob, InvalidKey
from outbox.job import MAX_PAYLOAD_BYTES, key_digest
from outbox.schemas.tables import messages
from tests.fixtures.records import (
    FINGERPRINT_SQL,
    counts,
    create_notes,
    db_now_ms,
    insert_note,
    message_rows,
)

NOTE = Job("notes.index", {"note_id": 1}, queue="search")


@pytest.fixture(autouse=True)
def notes(conn: Connection) -> Connection:
    create_notes(conn)
    return conn


def publish_by_hand(conn: Connection) -> None:
    """What the relay will do to a handed-off row: a tombstone without its payload."""
    conn.execute_sql("UPDATE outbox_messages SET state = 'published', payload = NULL")


def test_commit_keeps_the_business_write_and_the_intent(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    message_id = record(app_conn, "note:1:revision:2", NOTE)
    assert counts(notes)["outbox_messages"] == 0  # other connections see it only on commit
    app_conn.commit()
    assert counts(notes)["notes"] == 1
    rows = message_rows(notes)
    assert [(r["message_id"], r["state"], r["queue"], r["job_name"]) for r in rows] == [
        (message_id, "pending", "search", "notes.index")
    ]


def test_rollback_removes_the_business_write_and_the_intent(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    insert_note(app_conn, backend, 1)
    record(app_conn, "note:1:revision:2", NOTE)
    app_conn.rollback()
    assert counts(notes) == {
        "outbox_messages": 0,
        "outbox_jobs": 0,
        "outbox_failed_jobs": 0,
        "notes": 0,
    }
    # The key is free again: the rolled-back intent left nothing behind.
    assert record(app_conn, "note:1:revision:2", NOTE)
    app_conn.commit()
    assert counts(notes)["outbox_messages"] == 1


BAD_INPUTS: list[tuple[object, object, dict[str, Any], type[Exception], str]] = [
    ("", NOTE, {}, InvalidKey, "key is empty"),
    ("k" * 201, NOTE, {}, InvalidKey, "key is 201 bytes"),
    ("note:é", NOTE, {}, InvalidKey, "outside printable ASCII"),
    ("note\n1", NOTE, {}, InvalidKey, "outside printable ASCII"),
    (b"note:1", NOTE, {}, InvalidKey, "key must be a str"),
    ("schedule:x", NOTE, {}, InvalidKey, "reserved for the scheduler"),
    ("k", Job("a", float("nan")), {}, InvalidJob, "NaN or Infinity"),
    ("k", Job("a", {"x": float("-inf")}), {}, InvalidJob, "NaN or Infinity"),
    ("k", Job("a", {1: "x"}), {}, InvalidJob, "keys must be strings"),
    ("k", Job("a", b"x"), {}, InvalidJob, "a bytes"),
    ("k", Job("a", {"s": {1}}), {}, InvalidJob, "a set"),
    ("k", Job("a", datetime.now(UTC)), {}, InvalidJob, "a datetime"),
    ("k", Job("a", object()), {}, InvalidJob, "a object"),
    ("k", Job("a", "x" * MAX_PAYLOAD_BYTES), {}, InvalidJob, "the limit is 65535"),
    ("k", Job("a", 2**64), {}, InvalidJob, "signed 64-bit"),
    ("k", Job("bad name"), {}, InvalidJob, "job name must be"),
    ("k", Job("a", queue=""), {}, InvalidJob, "queue name must be"),
    ("k", Job("a", max_attempts=0), {}, InvalidJob, "max_attempts must be between"),
    ("k", {"name": "a"}, {}, InvalidJob, "expected an outbox.Job"),
    ("k", NOTE, {"available_at": datetime(2030, 1, 1)}, InvalidJob, "aware datetime"),
    ("k", NOTE, {"available_at": -1}, InvalidJob, "must not be negative"),
    ("k", NOTE, {"available_at": 60}, InvalidJob, "before the year 2000, not a delay"),
    ("k", NOTE, {"available_at": 946_684_799.5}, InvalidJob, "pass time.time() + 946684799.5"),
    ("k", NOTE, {"available_at": "soon"}, InvalidJob, "got str"),
]


def _deep(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_every_rejection_names_the_problem_and_leaves_the_database_unchanged(
    app_conn: Any, notes: Connection, backend: str
) -> None:
    before = counts(notes)
    insert_note(app_conn, backend, 1)
    cases = [*BAD_INPUTS]
    cases.append(("k", Job("a", _deep(65)), {}, InvalidJob, "nests deeper than 64"))
    for key, job, kwargs, error, text in cases:
        with pytest.raises(error) as info:
            record(app_conn, key, job, **kwargs)  # type: ignore[arg-type]
        assert text in str(info.value), (key, job)
    # Nothing was sent, so the caller's transaction is intact and commits its own write.
    app_conn.commit()
    assert counts(notes) == {**before, "notes": 1}


def test_replay_returns_the_same_id_in_the_same_or_a_later_transaction(
    app_conn: Any, conn: Connection
) -> None:
    first = record(app_conn, "note:1", Job("notes.index", {"a": 1, "b": 2}, queue="search"))
    assert record(app_conn, "note:1", Job("notes.index", {"a": 1, "b": 2}, queue="search")) == first
    app_conn.commit()
    again = record(app_conn, "note:1", Job("notes.index", {"b": 2, "a": 1}, queue="search"))
    app_conn.commit()
    assert again == first
    assert counts(conn)["outbox_messages"] == 1


def test_replay_after_the_row_was_published_returns_the_same_id(
    app_conn: Any, conn: Connection
) -> None:
    first = record(app_conn, "note:1", NOTE, available_at=1_900_000_000)
    app_conn.commit()
    publish_by_hand(conn)
    assert record(app_conn, "note:1", NOTE, available_at=1_900_000_000) == first
    app_conn.commit()
    assert [(r["message_id"], r["state"], r["payload"]) for r in message_rows(conn)] == [
        (first, "published", None)
    ]


CONFLICTING: list[tuple[str, Job, dict[str, Any]]] = [
    ("payload", Job("notes.index", {"note_id": 2}, queue="search"), {}),
    ("name", Job("notes.other", {"note_id": 1}, queue="search"), {}),
    ("queue", Job("notes.index", {"note_id": 1}, queue="default"), {}),
    ("max_attempts", Job("notes.index", {"note_id": 1}, queue="search", max_attempts=3), {}),
    ("available_at", NOTE, {"available_at": 1_900_000_000}),
]


@pytest.mark.parametrize("published", [False, True], ids=["pending", "published"])
def test_same_key_with_another_job_conflicts_names_the_winner_and_writes_nothing(
    app_conn: Any, notes: Connection, backend: str, published: bool
) -> None:
    winner = record(app_conn, "note:1", NOTE)
    app_conn.commit()
    if published:
        publish_by_hand(notes)
    before = message_rows(notes)
    for what, job, kwargs in CONFLICTING:
        insert_note(app_conn, backend, 7)
        with pytest.raises(IdempotencyConflict) as info:
            record(app_conn, "note:1", job, **kwargs)
        assert info.value.message_id == winner, what
        assert winner in str(info.value)
        app_conn.rollback()
    assert message_rows(notes) == before
    assert counts(notes)["notes"] == 0


def test_stored_row_keeps_the_digest_canonical_payload_and_null_for_immediate(
    app_conn: Any, conn: Connection
) -> None:
    key = "order:42:shipped-by:alice@example.com"
    payload = {"z": [3, 1, 2], "a": {"é": "日本"}, "n": None}
    before = db_now_ms(conn)
    message_id = record(app_conn, key, Job("orders.ship", payload, queue="mail", max_attempts=7))
    record(app_conn, "other", Job("orders.ship"), available_at=0.0)
    app_conn.commit()
    after = db_now_ms(conn)
    row, other = message_rows(conn)
    assert other["available_at"] is None
    assert before <= row["created_at"] <= after
    assert row["key_digest"] == key_digest(key)
    assert row["payload"] == '{"a":{"é":"日本"},"n":null,"z":[3,1,2]}'
    assert orjson.loads(row["payload"]) == payload
    assert (row["max_attempts"], row["available_at"], row["state"]) == (7, None, "pending")
    assert (row["published_at"], row["failed_at"], row["failure_reason"]) == (None, None, None)
    assert row["message_id"] == message_id
    every_value = conn.execute_sql(
        "SELECT " + ", ".join(c.name for c in messages.columns) + " FROM outbox_messages"
    )[0]
    assert not any(key in str(v) for v in every_value)
    assert not any("alice" in str(v) for v in every_value)


def test_future_availability_is_stored_as_given_and_equal_instants_replay(
    app_conn: Any, conn: Connection
) -> None:
    at = datetime(2030, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    first = record(app_conn, "later", NOTE, available_at=at)
    same_instant = at.astimezone(timezone(timedelta(hours=-7)))
    assert record(app_conn, "later", NOTE, available_at=same_instant) == first
    assert record(app_conn, "later", NOTE, available_at=at.timestamp()) == first
    app_conn.commit()
    assert [r["available_at"] for r in message_rows(conn)] == [1_903_867_200_250]


def test_database_recomputes_the_fingerprint_python_stored(
    app_conn: Any, conn: Connection, backend: str
) -> None:
    record(app_conn, "plain", Job("a"))
    record(
        app_conn,
        "full",
        Job("notes.index", {"t": "é日本🎉", "l": [1.5, -2, None]}, queue="search", max_attempts=9),
        available_at=1_900_000_000.5,
    )
    record(app_conn, "quote", Job("a.b:c-d_e", ["'\\\"\n\t"], queue="q"))
    record(app_conn, "scalar", Job("a", 42), available_at=datetime(2031, 1, 1, tzinfo=UTC))
    app_conn.commit()
    rows = conn.execute_sql(FINGERPRINT_SQL[backend])
    assert len(rows) == 4
    assert all(in_sql == stored for in_sql, stored in rows), rows


def test_largest_payload_is_stored_byte_for_byte(app_conn: Any, conn: Connection) -> None:
    payload = "日" * 21_844 + "a"  # 65,533 bytes of UTF-8, 65,535 with the quotes
    record(app_conn, "big", Job("a", payload))
    app_conn.commit()
    stored = message_rows(conn)[0]["payload"]
    assert len(stored.encode()) == MAX_PAYLOAD_BYTES
    assert orjson.loads(stored) == payload
