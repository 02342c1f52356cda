"""Encryption at rest (``outbox.job.sealing``) on every backend: every payload written is
ciphertext in every table, the handler gets the plaintext, replays are still recognised
(also across a rotation and from before encryption was on), results and dead-letter
messages are sealed, and a missing key or a tampered ciphertext parks the job (a dead
letter of class ``MissingKey``/``TamperedPayload``) instead of running it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox import Event, Job, Registry, Relay, Workflow, emit, record, record_many, sealing
from outbox.db.connection import Connection, Database
from outbox.errors import IdempotencyConflict
from outbox.queue import JobContext, push, push_many
from outbox.queue.admin import failed_job, retry
from outbox.results import get
from outbox.schedule.service import Scheduler, SchedulerConfig
from tests.fixtures.databases import placeholder
from tests.fixtures.factories import count_rows
from tests.fixtures.runs import drain, in_tx

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
SECRET = "alice@example.com"
ran: list[Any] = []
registry = Registry()


@registry.job("enc.mail", keep_result=True)
def mail(payload: Any, ctx: JobContext) -> Any:
    ran.append(payload)
    return {"sent_to": payload["to"]}


@registry.job("enc.fails", max_attempts=1)
def fails(payload: Any, ctx: JobContext) -> None:
    raise LookupError(f"no mailbox {payload['to']}")


registry.listen("enc.signed_up", lambda payload, ctx: ran.append(payload), name="enc.listener")


@pytest.fixture(autouse=True)
def keyring() -> Iterator[None]:
    ran.clear()
    sealing.configure({"k1": K1})
    yield
    sealing.reset()








# Every column that holds a payload, a result or a failure's text.
_COLUMNS = {
    "outbox_messages": ("payload",),
    "outbox_jobs": ("payload",),
    "outbox_failed_jobs": ("payload", "exception_message", "exception_trace"),
    "outbox_job_results": ("payload", "return_value", "exception_trace"),
    "outbox_workflow_nodes": ("payload",),
}


def _texts(conn: Connection) -> list[str]:
    out: list[str] = []
    for table, columns in _COLUMNS.items():
        for row in conn.execute_sql(f"SELECT {', '.join(columns)} FROM {table}"):
            out += [str(v) for v in row if v is not None]
    return out


def _assert_all_sealed(conn: Connection) -> None:
    texts = _texts(conn)
    assert texts and all(t.startswith('{"$sealed":"v1:') for t in texts), texts
    assert not any(SECRET in t for t in texts)


def test_every_producer_writes_ciphertext_and_the_handler_gets_plaintext(
    database: Database, conn: Connection
) -> None:
    payload = {"to": SECRET}
    in_tx(database, lambda c: record(c, "r1", Job("enc.mail", payload)))
    in_tx(database, lambda c: record_many(c, [("r2", Job("enc.mail", {"to": SECRET, "n": 2}))]))
    in_tx(database, lambda c: push(c, Job("enc.mail", {"to": SECRET, "n": 3})))
    in_tx(database, lambda c: push_many(c, [Job("enc.mail", {"to": SECRET, "n": 4})]))
    in_tx(database, lambda c: emit(c, "e1", Event("enc.signed_up", payload), registry=registry))
    wf = Workflow("enc.flow")
    wf.add(Job("enc.mail", {"to": SECRET, "n": 5}), name="send")
    in_tx(database, lambda c: record(c, "w1", wf))
    _assert_all_sealed(conn)
    with Relay(database) as relay:
        relay.run_once()
    _assert_all_sealed(conn)  # the relay moved ciphertext, and verified it as it is
    drain(database, registry)
    assert sorted(p.get("n", 0) for p in ran) == [0, 0, 2, 3, 4, 5]
    assert all(p["to"] == SECRET for p in ran)
    _assert_all_sealed(conn)  # the kept results too


def test_a_result_is_sealed_and_read_back_in_plaintext(
    database: Database, conn: Connection
) -> None:
    message_id = in_tx(database, lambda c: push(c, Job("enc.mail", {"to": SECRET})))
    drain(database, registry)
    stored = conn.execute_sql("SELECT return_value FROM outbox_job_results")[0][0]
    assert str(stored).startswith(sealing.MARKER)
    found = get(conn, message_id)
    assert found is not None and found.return_value == {"sent_to": SECRET}
    assert found.payload == {"to": SECRET}


def test_a_dead_letters_message_and_trace_are_sealed(database: Database, conn: Connection) -> None:
    message_id = in_tx(database, lambda c: push(c, Job("enc.fails", {"to": SECRET})))
    drain(database, registry)
    _assert_all_sealed(conn)
    dead = failed_job(conn, message_id)
    assert dead is not None and dead.exception_class == "LookupError"
    assert sealing.open_text(dead.exception_message or "") == f"no mailbox {SECRET}"


def test_replays_are_recognised_across_a_rotation_and_conflicts_still_detected(
    database: Database, conn: Connection
) -> None:
    first = in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": SECRET})))
    assert in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": SECRET}))) == first
    sealing.configure({"k2": K2, "k1": K1})  # rotated: k2 seals now
    assert in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": SECRET}))) == first
    assert in_tx(database, lambda c: record_many(c, [("k", Job("enc.mail", {"to": SECRET}))])) == [
        first
    ]
    with pytest.raises(IdempotencyConflict):
        in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": "bob"})))
    assert count_rows(conn, "outbox_messages") == 1


def test_a_key_recorded_before_encryption_was_on_replays_after(
    database: Database, conn: Connection
) -> None:
    sealing.configure(None)
    first = in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": SECRET})))
    sealing.configure({"k1": K1})
    assert in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": SECRET}))) == first
    with pytest.raises(IdempotencyConflict):
        in_tx(database, lambda c: record(c, "k", Job("enc.mail", {"to": "bob"})))
    drain(database, registry)
    assert ran == [{"to": SECRET}]  # the plaintext row still runs


def test_a_job_whose_key_is_missing_is_parked_then_runs_once_the_key_is_back(
    database: Database, conn: Connection
) -> None:
    message_id = in_tx(database, lambda c: push(c, Job("enc.mail", {"to": SECRET})))
    sealing.configure({"k2": K2})  # k1 is gone from this process
    with capture_logs() as logs:
        drain(database, registry)
    assert ran == []
    dead = failed_job(conn, message_id)
    assert dead is not None and dead.exception_class == "outbox.errors.MissingKey"
    kept = conn.execute_sql("SELECT payload FROM outbox_failed_jobs")[0][0]
    assert str(kept).startswith('{"$sealed":"v1:k1:')  # kept: nothing lost
    named = [e for e in logs if e.get("key_id") == "k1"]
    assert len(named) == 1 and named[0]["event"] == "sealing.missing_key"
    assert not any(SECRET in str(e) for e in logs)
    sealing.configure({"k2": K2, "k1": K1})  # the key is back
    assert retry(conn, message_id) == 1
    drain(database, registry)
    assert ran == [{"to": SECRET}]


def test_a_tampered_ciphertext_is_parked_and_never_run(
    database: Database, conn: Connection
) -> None:
    message_id = in_tx(database, lambda c: push(c, Job("enc.mail", {"to": SECRET})))
    stored = str(conn.execute_sql("SELECT payload FROM outbox_jobs")[0][0])
    body_at = len('{"$sealed":"v1:k1:') + 20
    flipped = "A" if stored[body_at] != "A" else "B"
    changed = stored[:body_at] + flipped + stored[body_at + 1 :]
    ph = placeholder(conn)
    with conn.transaction() as t:
        t.execute_sql(f"UPDATE outbox_jobs SET payload = {ph}", (changed,))
    drain(database, registry)
    assert ran == []
    dead = failed_job(conn, message_id)
    assert dead is not None and dead.exception_class == "outbox.errors.TamperedPayload"
    assert conn.execute_sql("SELECT payload FROM outbox_failed_jobs")[0][0] == changed


def test_a_periodic_jobs_tick_is_sealed_and_its_replay_recognised(
    database: Database, conn: Connection
) -> None:
    periodic = Registry()
    periodic.schedule("0 * * * *", name="enc.tick", job="enc.mail", payload={"to": SECRET})
    clock = lambda: 1_800_000_000.0  # noqa: E731
    config = SchedulerConfig(catch_up="all", catch_up_window=3600)
    with Scheduler(database, periodic, config, clock=clock) as first:
        [tick] = first.run_once()
    _assert_all_sealed(conn)
    with Scheduler(database, periodic, config, clock=clock) as again:
        [replay] = again.run_once()  # the same tick: recognised, not a conflict
    assert replay.message_id == tick.message_id
    assert count_rows(conn, "outbox_messages") == 1
