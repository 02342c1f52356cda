"""Job results (``outbox.results``) on every backend, through a real worker: the outcome
is written in the acknowledgement's (or the dead-lettering's) transaction, bounded, read
back by id, pruned past its retention; jobs that keep no result write nothing more."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job, Registry, Relay, record
from outbox.db.connection import Connection, Database
from outbox.errors import ConfigurationError
from outbox.queue import JobContext, Worker, WorkerConfig, push
from outbox.results import (
    FAILED,
    MAX_RESULT_BYTES,
    READY,
    SUCCESSFUL,
    get,
    prune,
)
from tests.fixtures.databases import placeholder
from tests.fixtures.factories import count_rows

registry = Registry()


@registry.job("r.add", keep_result=True)
def add(payload: Any, ctx: JobContext) -> Any:
    return {"sum": payload["a"] + payload["b"], "attempt": ctx.attempt}


@registry.job("r.async", keep_result=60)
async def add_async(payload: Any, ctx: JobContext) -> Any:
    return [payload["a"], payload["b"]]


@registry.job("r.fails", keep_result=True, max_attempts=1)
def fails(payload: Any, ctx: JobContext) -> None:
    raise LookupError(f"secret {payload['secret']} not found")


@registry.job("r.fails_unkept", max_attempts=1)
def fails_unkept(payload: Any, ctx: JobContext) -> None:
    raise LookupError(f"secret {payload['secret']} not found")


@registry.job("r.too_big", keep_result=True)
def too_big(payload: Any, ctx: JobContext) -> str:
    return "x" * MAX_RESULT_BYTES


@registry.job("r.not_json", keep_result=True)
def not_json(payload: Any, ctx: JobContext) -> object:
    return object()


@registry.job("r.transactional", keep_result=True, transactional=True)
def in_tx(payload: Any, ctx: JobContext) -> int:
    return 7


@registry.job("r.plain")
def plain(payload: Any, ctx: JobContext) -> int:
    return 1


def _push(database: Database, name: str, payload: Any) -> str:
    with database.connect() as c:
        return c.transact(lambda t: push(t.raw, Job(name, payload)), operation="test")


def _drain(database: Database) -> None:
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.05)) as w:
        w.run()


def test_a_success_keeps_its_return_value_written_by_the_ack(
    database: Database, conn: Connection
) -> None:
    ids = [_push(database, "r.add", {"a": 1, "b": 2}), _push(database, "r.async", {"a": 3, "b": 4})]
    assert get(database, ids[0]).status == READY  # type: ignore[union-attr]
    _drain(database)
    first, second = (get(conn, i) for i in ids)
    assert first is not None and second is not None
    assert (first.status, first.return_value, first.attempts) == (
        SUCCESSFUL, {"sum": 3, "attempt": 1}, 1)
    assert second.return_value == [3, 4] and second.payload == {"a": 3, "b": 4}
    assert first.started_at is not None and first.finished_at is not None
    assert first.enqueued_at is not None and first.enqueued_at <= first.finished_at
    assert first.started_at <= first.finished_at and len(first.worker_ids) == 1
    assert count_rows(conn, "outbox_jobs") == 0


def test_a_recorded_job_reads_as_ready_before_the_relay_hands_it_off(
    database: Database, conn: Connection
) -> None:
    """record() enqueues into the outbox: its job is known (READY, attempt 0) from the
    commit on, not only once the relay has moved it (Django's get_result raised)."""
    with database.connect() as c:
        mid = c.transact(lambda t: record(t.raw, "res:1", Job("r.add", {"a": 1, "b": 1})),
                         operation="test")  # fmt: skip
    pending = get(conn, mid)
    assert pending is not None
    assert (pending.status, pending.attempts, pending.payload) == (READY, 0, {"a": 1, "b": 1})
    assert pending.enqueued_at is not None and pending.worker_ids == []
    with Relay(database) as relay:
        relay.run_once()
    _drain(database)
    done = get(conn, mid)
    assert done is not None and (done.status, done.return_value["sum"]) == (SUCCESSFUL, 2)


def test_a_failure_keeps_class_and_trace_never_the_message(
    database: Database, conn: Connection
) -> None:
    mid = _push(database, "r.fails", {"secret": "hunter2"})
    _drain(database)
    result = get(conn, mid)
    assert result is not None and result.status == FAILED
    assert [e.exception_class for e in result.errors] == ["LookupError"]
    assert "raise LookupError" in result.errors[0].traceback
    assert "hunter2" not in repr(result.errors)
    assert count_rows(conn, "outbox_failed_jobs") == 1  # the dead letter, as ever


def test_a_dead_letter_read_as_a_result_shows_no_exception_message(
    database: Database, conn: Connection
) -> None:
    """A job that keeps no result is FAILED from its dead letter, whose traceback keeps
    the message: the result shows it without, as a kept result does."""
    mid = _push(database, "r.fails_unkept", {"secret": "hunter2"})
    _drain(database)
    assert count_rows(conn, "outbox_job_results") == 0
    result = get(conn, mid)
    assert result is not None and result.status == FAILED
    assert "raise LookupError" in result.errors[0].traceback
    assert result.errors[0].traceback.endswith("LookupError")
    assert "hunter2" not in repr(result.errors)
    dead = conn.driver.dead_show(mid)
    assert dead is not None and "hunter2" in (dead.exception_trace or "")  # kept there


@pytest.mark.parametrize(
    ("name", "why"),
    [("r.too_big", "at most 65,535 can be kept"), ("r.not_json", "not JSON-serialisable")],
)
def test_a_value_that_cannot_be_kept_fails_the_job_with_a_clear_error(
    database: Database, conn: Connection, name: str, why: str
) -> None:
    mid = _push(database, name, {})
    _drain(database)
    result = get(conn, mid)
    assert result is not None and result.status == FAILED and result.attempts == 1
    assert result.errors[0].exception_class == "outbox.results.InvalidResult"
    dead = conn.driver.dead_show(mid)
    assert dead is not None and why in (dead.exception_message or "")


def test_a_transactional_handler_writes_its_result_in_its_own_commit(
    database: Database, conn: Connection
) -> None:
    mid = _push(database, "r.transactional", {})
    _drain(database)
    result = get(conn, mid)
    assert result is not None and (result.status, result.return_value) == (SUCCESSFUL, 7)


def test_jobs_that_keep_no_result_write_none(database: Database, conn: Connection) -> None:
    mid = _push(database, "r.plain", {})
    _drain(database)
    assert get(conn, mid) is None
    assert count_rows(conn, "outbox_job_results") == 0


def test_prune_drops_only_results_past_their_retention(
    database: Database, conn: Connection
) -> None:
    ids = [_push(database, "r.add", {"a": 1, "b": 1}) for _ in range(3)]
    _drain(database)
    p = placeholder(conn)
    with conn.transaction():
        conn.execute_sql(
            f"UPDATE outbox_job_results SET expires_at = 0 WHERE message_id IN ({p}, {p})",
            (ids[0], ids[1]),
        )
    assert prune(conn, batch=1) == 2
    assert [get(conn, i) is None for i in ids] == [True, True, False]


@pytest.mark.parametrize(
    "bad", [0, -1, float("inf"), "week", 10 * 365 * 86_400 + 1]
)
def test_keep_result_is_checked_where_the_handler_registers(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="keep_result must be"):
        Registry().job("r.bad", keep_result=bad)  # type: ignore[arg-type]


def test_an_unknown_id_is_none(database: Database) -> None:
    assert get(database, "00000000-0000-0000-0000-000000000000") is None


def test_the_cli_shows_a_result_and_refuses_what_it_does_not_know(
    db_url: str, database: Database
) -> None:
    import orjson
    from click.testing import CliRunner

    from outbox.cli import main

    mid = _push(database, "r.add", {"a": 2, "b": 5})
    _drain(database)
    shown = CliRunner().invoke(main, ["--database-url", db_url, "result", mid, "--json"])
    assert shown.exit_code == 0, shown.output
    data = orjson.loads(shown.output)
    assert (data["status"], data["return_value"]) == (SUCCESSFUL, {"sum": 7, "attempt": 1})
    text = CliRunner().invoke(main, ["--database-url", db_url, "result", mid])
    assert "status:       SUCCESSFUL" in text.output and '"sum":7' in text.output
    unknown = CliRunner().invoke(
        main, ["--database-url", db_url, "result", "00000000-0000-4000-8000-000000000000"]
    )
    assert unknown.exit_code == 1 and "no job 00000000" in unknown.output
    bad = CliRunner().invoke(main, ["--database-url", db_url, "result", "nope"])
    assert bad.exit_code == 2 and "not a message id" in bad.output


def test_outbox_prune_drops_expired_results(
    db_url: str, database: Database, conn: Connection
) -> None:
    from click.testing import CliRunner

    from outbox.cli import main

    mid = _push(database, "r.add", {"a": 1, "b": 1})
    _drain(database)
    with conn.transaction():
        conn.execute_sql("UPDATE outbox_job_results SET expires_at = 0")
    done = CliRunner().invoke(main, ["--database-url", db_url, "prune", "0"])
    assert done.exit_code == 0, done.output
    assert get(conn, mid) is None
