"""Typed jobs on every backend, through a real worker: the handler gets the typed value,
a bad value is refused at record time with nothing written, a payload recorded under
version 1 runs under version 2 (upgraded), a newer one is dead-lettered as
``PayloadVersionError`` (never run, retryable), typed and encrypted together, and
``outbox schema JOB`` prints the JSON Schema."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import orjson
import pydantic
import pytest
from click.testing import CliRunner

from outbox import Job, Registry, job_type, push, record, record_many, sealing
from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.errors import InvalidJob
from outbox.queue import JobContext
from outbox.queue.admin import failed_job
from tests.fixtures.factories import count_rows
from tests.fixtures.runs import drain, in_tx


@job_type("typed.welcome", queue="typed")
@dataclasses.dataclass
class Welcome:
    user_id: int
    email: str


def _v1_to_v2(data: dict[str, Any], version: int) -> dict[str, Any]:
    """Version 1 had ``name``; version 2 splits it."""
    first, _, last = data.pop("name").partition(" ")
    return {**data, "first": first, "last": last}


@job_type("typed.person", queue="typed", version=2, upgrade=_v1_to_v2)
class Person(pydantic.BaseModel):
    first: str
    last: str


got: list[Any] = []
registry = Registry()


@registry.job("typed.welcome")
def welcome(payload: Welcome, ctx: JobContext) -> None:
    got.append(payload)


@registry.job("typed.person", max_attempts=1)
def person(payload: Person, ctx: JobContext) -> None:
    got.append(payload)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    got.clear()
    yield
    sealing.reset()






def test_the_handler_gets_the_typed_value(database: Database) -> None:
    in_tx(database, lambda c: record(c, "w1", Welcome(user_id=1, email="a@x")))  # type: ignore[arg-type]
    in_tx(database, lambda c: record_many(c, [("w2", Welcome(user_id=2, email="b@x"))]))  # type: ignore[list-item]
    in_tx(
        database,
        lambda c: push(c, Job("typed.welcome", Welcome(user_id=3, email="c@x"), queue="typed")),
    )
    drain(database, registry, ("typed",))
    assert sorted(got, key=lambda w: w.user_id) == [
        Welcome(1, "a@x"),
        Welcome(2, "b@x"),
        Welcome(3, "c@x"),
    ]


def test_a_bad_value_is_refused_at_record_time_and_nothing_is_written(
    database: Database, conn: Connection
) -> None:
    with pytest.raises(InvalidJob, match="field 'user_id' must be int"):
        in_tx(database, lambda c: record(c, "w1", Welcome(user_id="1", email="a@x")))  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="item 1: payload field 'email'"):
        in_tx(
            database,
            lambda c: record_many(
                c,
                [
                    ("ok", Welcome(1, "a@x")),
                    ("bad", Welcome(2, None)),  # type: ignore[arg-type]
                ],
            ),
        )
    assert count_rows(conn, "outbox_messages") == 0 and count_rows(conn, "outbox_keys") == 0


def test_a_version_1_payload_runs_under_version_2_and_a_newer_one_is_parked(
    database: Database, conn: Connection
) -> None:
    # What version-1 code stored (no _version), and what a version-3 producer would.
    in_tx(
        database,
        lambda c: record(c, "p1", Job("typed.person", {"name": "Ada Lovelace"}, queue="typed")),
    )
    newer = {"_version": 3, "first": "Alan", "last": "Turing", "middle": "M"}
    newer_id = in_tx(database, lambda c: record(c, "p3", Job("typed.person", newer, queue="typed")))
    in_tx(database, lambda c: record(c, "p2", Person(first="Grace", last="Hopper")))  # type: ignore[arg-type]
    drain(database, registry, ("typed",))
    assert sorted((p.first, p.last) for p in got) == [("Ada", "Lovelace"), ("Grace", "Hopper")]
    dead = failed_job(conn, newer_id)
    assert dead is not None and dead.exception_class == "outbox.job.typed.PayloadVersionError"
    assert "version 3 is newer than this code's 2" in (dead.exception_message or "")
    assert count_rows(conn, "outbox_failed_jobs") == 1  # kept, for `queue retry` after deploy


def test_typed_and_encrypted_together(database: Database, conn: Connection) -> None:
    sealing.configure({"k1": bytes(range(32))})
    in_tx(database, lambda c: record(c, "w1", Welcome(user_id=7, email="secret@x")))  # type: ignore[arg-type]
    stored = conn.execute_sql("SELECT payload FROM outbox_messages")[0][0]
    assert str(stored).startswith(sealing.MARKER) and "secret@x" not in str(stored)
    drain(database, registry, ("typed",))
    assert got == [Welcome(7, "secret@x")]


def test_outbox_schema_prints_the_payloads_json_schema(db_url: str) -> None:
    app = "tests.conformance.test_typed_jobs:registry"
    result = CliRunner().invoke(
        main, ["--database-url", db_url, "schema", "typed.person", "--app", app]
    )
    assert result.exit_code == 0, result.output
    schema = orjson.loads(result.output)
    assert schema["x-outbox-job"] == "typed.person" and schema["properties"]["_version"] == {
        "const": 2
    }
    assert set(schema["required"]) == {"first", "last"}
    result = CliRunner().invoke(
        main, ["--database-url", db_url, "schema", "nope.job", "--app", app]
    )
    assert result.exit_code == 2 and "'nope.job' has no payload type" in result.output


def test_outbox_schema_without_a_job_lists_the_typed_jobs(db_url: str) -> None:
    app = "tests.conformance.test_typed_jobs:registry"
    result = CliRunner().invoke(main, ["--database-url", db_url, "schema", "--app", app])
    assert result.exit_code == 0, result.output
    listed = result.output.split()
    assert listed == sorted(listed) and {"typed.person", "typed.welcome"} <= set(listed)
