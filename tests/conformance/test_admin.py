"""Operator actions on every backend: status, failed, retry, prune."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job, record
from outbox import status as outbox_status
from outbox.db.connection import Connection, Database
from outbox.errors import InvalidMessageId, MessageNotFound, RetryRefused
from outbox.ids import new_message_id
from outbox.relay import Relay, RelayConfig, admin
from tests.fixtures.factories import Rows
from tests.fixtures.relays import (
    MARKER,
    db_now_ms,
    outbox_rows,
    queued_ids,
    record_many,
    set_column,
)

DAY_MS = 86_400_000


def _run(database: Database) -> None:
    with Relay(database, RelayConfig()) as relay:
        relay.run()


def test_status_counts_intents_by_state_and_jobs_by_queue(
    database: Database, db_url: str, conn: Connection, rows: Rows
) -> None:
    empty = outbox_status.status(conn)
    assert empty.as_dict() == {
        "schema_version": 1,
        "outbox": {
            "pending": 0,
            "published": 0,
            "failed": 0,
            "quarantined": 0,
            "unknown_state": 0,
            "oldest_pending_age_s": None,
        },
        "queues": {},
        "encryption": {
            "on": False,
            "sealing_key": None,
            "keyring": [],
            "rows": {},
            "not_in_keyring": [],
        },
    }
    done = record_many(db_url, ["s1", "s2", "s3"])
    set_column(conn, done[2], "payload", "[")
    _run(database)
    record_many(db_url, ["s4", "s5"])
    rows.job(queue="q2", available_at=db_now_ms(conn) + 3_600_000)
    rows.job(queue="q2", reserved_by="w1")
    rows.dead_letter(queue="q2", payload=f'"{MARKER}"', exception_message="boom")
    rows.dead_letter(queue="q3", payload=f'"{MARKER}"', exception_message="boom")
    status = outbox_status.status(conn).as_dict()
    assert status["outbox"]["pending"] == 2
    assert status["outbox"]["published"] == 2
    assert status["outbox"]["failed"] == status["outbox"]["quarantined"] == 1
    assert status["outbox"]["oldest_pending_age_s"] >= 0
    assert status["queues"] == {
        "q1": {"ready": 2, "delayed": 0, "reserved": 0, "dead": 0, "dead_letters": 0,
               "paused": False},
        "q2": {"ready": 0, "delayed": 1, "reserved": 1, "dead": 1, "dead_letters": 1,
               "paused": False},
        "q3": {"ready": 0, "delayed": 0, "reserved": 0, "dead": 1, "dead_letters": 1,
               "paused": False},
    }  # fmt: skip
    assert MARKER not in repr(status)


def test_status_ages_the_oldest_pending_intent_by_the_database_clock(
    db_url: str, conn: Connection, database: Database
) -> None:
    [mid] = record_many(db_url, ["old"])
    set_column(conn, mid, "created_at", db_now_ms(conn) - 90_000)
    record_many(db_url, ["new"])
    age = outbox_status.status(conn).outbox.oldest_pending_age_s
    assert age is not None and 90 <= age < 90 + 600


def test_failed_lists_quarantined_intents_without_payloads(
    database: Database, db_url: str, conn: Connection
) -> None:
    a, b, c = record_many(db_url, ["f1", "f2", "f3"])
    set_column(conn, a, "payload", f'"{MARKER} changed"')
    set_column(conn, c, "job_name", "no good")
    _run(database)
    listed = admin.failed(conn)
    assert [(f.message_id, f.reason) for f in listed] == [
        (a, "fingerprint_mismatch"),
        (c, "invalid_name"),
    ]
    assert all(f.failed_at_ms is not None and f.failed_at_ms >= f.created_at_ms for f in listed)
    assert [f.message_id for f in admin.failed(conn, limit=1)] == [a]
    assert MARKER not in repr(listed)
    assert b in queued_ids(conn)


def test_retry_returns_a_repaired_intent_to_pending_and_the_relay_hands_it_off(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["r1"])
    [(original,)] = conn.execute_sql("SELECT payload FROM outbox_messages")
    set_column(conn, mid, "payload", "{broken")
    _run(database)
    assert outbox_rows(conn)[mid] == ("failed", "invalid_json", False)
    set_column(conn, mid, "payload", original)
    assert admin.retry(conn, mid) == "requeued"
    assert outbox_rows(conn)[mid] == ("pending", None, False)
    _run(database)
    assert outbox_rows(conn)[mid] == ("handed_off", None, True)
    assert queued_ids(conn) == [mid]


def test_retry_refuses_an_intent_that_still_does_not_verify(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["r2"])
    set_column(conn, mid, "payload", '{"edited":true}')
    _run(database)
    before = conn.execute_sql("SELECT * FROM outbox_messages")
    with pytest.raises(RetryRefused, match="fingerprint_mismatch") as caught:
        admin.retry(conn, mid)
    assert "--accept-current" in str(caught.value)
    assert conn.execute_sql("SELECT * FROM outbox_messages") == before


def test_retry_accept_current_reseals_the_row_canonically(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["r3"])
    set_column(conn, mid, "payload", '{ "z": 1, "a": [1, 2] }')
    _run(database)
    assert admin.retry(conn, mid, accept_current=True) == "accepted"
    assert outbox_rows(conn)[mid] == ("pending", None, False)
    [(payload,)] = conn.execute_sql("SELECT payload FROM outbox_messages")
    assert payload == '{"a":[1,2],"z":1}'
    _run(database)
    [(queued,)] = conn.execute_sql("SELECT payload FROM outbox_jobs")
    assert queued == '{"a":[1,2],"z":1}'


def test_retry_accept_current_still_refuses_bad_json_and_bad_names(
    database: Database, db_url: str, conn: Connection
) -> None:
    a, b = record_many(db_url, ["r4", "r5"])
    set_column(conn, a, "payload", "{nope")
    set_column(conn, b, "queue", "bad queue")
    _run(database)
    before = conn.execute_sql("SELECT * FROM outbox_messages ORDER BY id")
    with pytest.raises(RetryRefused, match="invalid_json"):
        admin.retry(conn, a, accept_current=True)
    with pytest.raises(RetryRefused, match="invalid_queue"):
        admin.retry(conn, b, accept_current=True)
    assert conn.execute_sql("SELECT * FROM outbox_messages ORDER BY id") == before


def test_retry_names_unknown_pending_and_malformed_ids(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["r6"])
    unknown = new_message_id()
    with pytest.raises(MessageNotFound, match=unknown):
        admin.retry(conn, unknown)
    with pytest.raises(RetryRefused, match="is pending, not failed"):
        admin.retry(conn, mid)
    with pytest.raises(InvalidMessageId, match="not a message id"):
        admin.retry(conn, "12; DROP TABLE outbox_messages")
    assert outbox_rows(conn)[mid] == ("pending", None, False)


def _age_key(conn: Connection, message_id: str, days: float) -> None:
    """Make the key row of ``message_id`` look recorded ``days`` ago."""
    at = db_now_ms(conn) - int(days * DAY_MS)
    conn.execute_sql(
        f"UPDATE outbox_keys SET created_at = {at} WHERE message_id = '{message_id}'"
    )


def _keys(conn: Connection) -> set[str]:
    return {r[0] for r in conn.execute_sql("SELECT message_id FROM outbox_keys")}


def test_prune_deletes_old_keys_of_handed_off_intents_oldest_first_within_the_limit(
    database: Database, db_url: str, conn: Connection
) -> None:
    ids = record_many(db_url, [f"p{i}" for i in range(6)])
    set_column(conn, ids[5], "payload", "[")
    _run(database)  # ids[0..4] handed off, ids[5] quarantined
    for mid, days in zip(ids[:5], (40, 35, 31, 5, 1), strict=True):
        _age_key(conn, mid, days)
    pending = record_many(db_url, ["p-pending"])
    _age_key(conn, ids[5], 90)  # old, but quarantined: its key stays
    _age_key(conn, pending[0], 90)  # old, but pending: its key stays
    assert admin.prune(conn, 30, limit=2, batch=1) == 2
    assert _keys(conn) == set(ids[2:]) | set(pending)
    assert admin.prune(conn, 30) == 1
    assert _keys(conn) == set(ids[3:]) | set(pending)
    assert admin.prune(conn, 0) == 2
    assert _keys(conn) == {ids[5], pending[0]}
    rows = outbox_rows(conn)
    assert rows == {ids[5]: ("failed", "invalid_json", False), pending[0]: ("pending", None, False)}
    status = outbox_status.status(conn).outbox
    assert (status.pending, status.failed, status.published) == (1, 1, 0)


def test_status_counts_published_as_the_keys_of_handed_off_intents(
    database: Database, db_url: str, conn: Connection
) -> None:
    record_many(db_url, ["s1", "s2", "s3"])
    assert outbox_status.status(conn).outbox.published == 0
    _run(database)
    record_many(db_url, ["s4"])
    counts = outbox_status.status(conn).outbox
    assert (counts.pending, counts.published, counts.failed) == (1, 3, 0)
    admin.prune(conn, 0)
    assert outbox_status.status(conn).outbox.published == 0


def test_prune_ends_deduplication_for_the_pruned_keys(
    database: Database, db_url: str, conn: Connection
) -> None:
    [first] = record_many(db_url, ["again"])
    assert record_many(db_url, ["again"]) == [first]
    _run(database)
    assert admin.prune(conn, 0) == 1
    [second] = record_many(db_url, ["again"])
    assert second != first


def test_prune_refuses_negative_days(conn: Connection) -> None:
    with pytest.raises(ValueError, match="days"):
        admin.prune(conn, -1)


def test_retry_accepts_a_message_id_in_upper_case_on_every_backend(
    database: Database, db_url: str, conn: Connection
) -> None:
    [mid] = record_many(db_url, ["r7"])
    [(original,)] = conn.execute_sql("SELECT payload FROM outbox_messages")
    set_column(conn, mid, "payload", "{broken")
    _run(database)
    set_column(conn, mid, "payload", original)
    assert admin.retry(conn, mid.upper()) == "requeued"
    assert outbox_rows(conn)[mid] == ("pending", None, False)


def test_retry_of_a_keyed_intent_reverifies_it_with_its_ordering_key(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    """The key is sealed in the fingerprint: a retry that re-verified the intent without
    it refused every keyed intent, and --accept-current resealed it keyless, so the
    relay quarantined it again."""
    repaired = record(app_conn, "rk:1", Job("t.job", {"n": 1}, ordering_key="order:r"))
    edited = record(app_conn, "rk:2", Job("t.job", {"n": 2}, ordering_key="order:r"))
    app_conn.commit()
    [(original,)] = conn.execute_sql(
        "SELECT payload FROM outbox_messages WHERE message_id = %s"
        if database.dialect.name != "sqlite" else
        "SELECT payload FROM outbox_messages WHERE message_id = ?", (repaired,))  # fmt: skip
    set_column(conn, repaired, "payload", "{broken")
    set_column(conn, edited, "payload", '{"n": 3}')
    _run(database)
    assert outbox_rows(conn)[repaired][:2] == ("failed", "invalid_json")
    assert outbox_rows(conn)[edited][:2] == ("failed", "fingerprint_mismatch")
    set_column(conn, repaired, "payload", original)
    assert admin.retry(conn, repaired) == "requeued"
    assert admin.retry(conn, edited, accept_current=True) == "accepted"
    _run(database)
    assert queued_ids(conn) == [repaired, edited]  # both verified, in order
