"""Typed jobs (``outbox.job.typed``) without a database: declaring a type checks it, a typed
value becomes its job and is validated field by field (``InvalidJob`` naming the field),
the JSON Schema, and payload versions with their upgrade."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

import pydantic
import pytest

from outbox import Job, job_type, typed_job
from outbox.errors import ConfigurationError, InvalidJob
from outbox.job import normalise
from outbox.job.typed import PayloadVersionError, spec_of


@job_type("t.welcome", queue="mail")
@dataclasses.dataclass
class Welcome:
    user_id: int
    tags: list[str] = dataclasses.field(default_factory=list)
    channel: Literal["email", "sms"] = "email"


@job_type("t.address")
class Address(TypedDict):
    street: str
    number: int | None


@job_type("t.order")
class Order(pydantic.BaseModel):
    order_id: int
    total: float


@job_type("t.note")
class Note(pydantic.BaseModel):
    user_id: int
    extra: Any = None


@job_type("t.memo")
@dataclasses.dataclass
class Memo:
    user_id: int
    extra: Any = None


class _Opaque:
    """Not a JSON value; its repr would carry what it holds."""

    def __repr__(self) -> str:
        return "_Opaque(secret@example.com)"


def _upgrade(data: dict[str, Any], version: int) -> dict[str, Any]:
    return {"full_name": data.pop("name"), **data} if version == 1 else data


@job_type("t.person", version=2, upgrade=_upgrade)
@dataclasses.dataclass
class Person:
    full_name: str


def test_a_typed_value_is_its_job_validated_and_dumped() -> None:
    normal = normalise(Welcome(user_id=1, tags=["a"]))  # type: ignore[arg-type]
    assert (normal.name, normal.queue) == ("t.welcome", "mail")
    assert normal.payload_json == '{"channel":"email","tags":["a"],"user_id":1}'
    assert normalise(Job("t.welcome", Welcome(user_id=2), priority=3)).priority == 3
    assert normalise(typed_job(Address, {"street": "Main", "number": None})).payload_json == (
        '{"number":null,"street":"Main"}'
    )
    assert normalise(Order(order_id=1, total=2)).payload_json == '{"order_id":1,"total":2.0}'  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (Welcome(user_id="1"), r"field 'user_id' must be int \(got str\)"),  # type: ignore[arg-type]
        (Welcome(user_id=True), r"field 'user_id' must be int \(got bool\)"),
        (Welcome(user_id=1, tags=[1]), r"field 'tags\[0\]' must be str"),  # type: ignore[list-item]
        (Welcome(user_id=1, channel="fax"), "field 'channel' must be one of"),  # type: ignore[arg-type]
        (typed_job(Address, {"street": "x"}), "field 'number' is missing"),
        (typed_job(Address, {"street": 1, "number": 1}), "field 'street' must be str"),
        (typed_job(Order, {"order_id": "x", "total": 1}), "field 'order_id'"),
    ],
)
def test_a_bad_field_raises_invalid_job_naming_it(value: Any, wanted: str) -> None:
    with pytest.raises(InvalidJob, match=wanted):
        normalise(value)


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (Note(user_id=1, extra=_Opaque()), "field 'extra' of Note cannot be serialised to JSON"),
        (Note(user_id=1, extra=b"\xff"), "field 'extra' of Note cannot be serialised to JSON"),
        (Memo(user_id=1, extra=_Opaque()), "field 'extra': payload contains a _Opaque"),
        (Memo(user_id=1, extra={"a": {1}}), "field 'extra': payload contains a set"),
        (Memo(user_id=1, extra=[float("nan")]), "field 'extra': payload contains NaN"),
    ],
)
def test_a_value_that_does_not_serialise_to_json_is_refused_naming_the_field(
    value: Any, wanted: str
) -> None:
    with pytest.raises(InvalidJob, match=wanted) as caught:
        normalise(value)
    assert "secret@example.com" not in str(caught.value)  # never the value itself


def test_a_type_that_cannot_be_json_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ConfigurationError, match="cannot be a JSON payload field"):

        @job_type("t.bad")
        @dataclasses.dataclass
        class Bad:
            when: set[int]

    with pytest.raises(ConfigurationError, match="is not a dataclass, TypedDict or pydantic"):
        job_type("t.plain")(object)
    with pytest.raises(ConfigurationError, match="needs upgrade="):
        job_type("t.v2", version=2)
    with pytest.raises(InvalidJob, match="job name must be"):
        job_type("bad name")


def test_the_json_schema_of_each_kind() -> None:
    schema = spec_of(Welcome).schema()
    assert schema["x-outbox-job"] == "t.welcome" and schema["required"] == ["user_id"]
    assert schema["properties"]["channel"] == {"enum": ["email", "sms"]}
    assert spec_of(Address).schema()["properties"]["number"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}]
    }
    assert spec_of(Order).schema()["properties"]["total"]["type"] == "number"
    assert spec_of(Person).schema()["properties"]["_version"] == {"const": 2}


def test_a_version_1_payload_is_upgraded_and_a_newer_one_refused() -> None:
    spec = spec_of(Person)
    assert normalise(Person(full_name="Ada")).payload_json == '{"_version":2,"full_name":"Ada"}'  # type: ignore[arg-type]
    assert spec.load({"name": "Ada"}) == Person(full_name="Ada")  # recorded under v1
    assert spec.load({"_version": 2, "full_name": "Ada"}) == Person(full_name="Ada")
    with pytest.raises(PayloadVersionError, match="version 3 is newer than this code's 2"):
        spec.load({"_version": 3, "full_name": "Ada"})
    with pytest.raises(PayloadVersionError, match="needs an upgrade"):
        spec_of(Welcome).__class__(Welcome, "t.x", "q", 2, None, False).load({"user_id": 1})


def test_untyped_jobs_are_unchanged() -> None:
    assert normalise(Job("t.any", {"a": (1, 2)})).payload_json == '{"a":[1,2]}'
    with pytest.raises(InvalidJob, match=r"expected an outbox\.Job"):
        normalise({"a": 1})  # type: ignore[arg-type]
