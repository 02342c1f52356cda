"""Payload normalisation: canonical JSON, limits, and every value JSON cannot carry."""

from __future__ import annotations

import dataclasses
import decimal
import enum
import uuid
from datetime import UTC, date, datetime
from typing import Any

import orjson
import pytest

from outbox.errors import InvalidJob
from outbox.job import MAX_PAYLOAD_BYTES, Job, canonical_json, normalise


def nested(depth: int) -> Any:
    """``depth`` containers: ``{}`` is 1, ``{"a": []}`` is 2, alternating objects/arrays."""
    value: Any = {} if depth % 2 else []
    for level in range(depth - 1, 0, -1):
        value = {"a": value} if level % 2 else [value]
    return value


@dataclasses.dataclass
class Point:
    x: int


class Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (None, "null"),
        ({"b": 1, "a": {"d": 2, "c": 3}}, '{"a":{"c":3,"d":2},"b":1}'),
        ([3, 1, 2], "[3,1,2]"),
        ((1, (2, 3)), "[1,[2,3]]"),
        ("é日本", '"é日本"'),
        (True, "true"),
        (1.5, "1.5"),
        (2**63 - 1, "9223372036854775807"),
        (-(2**63), "-9223372036854775808"),
        ({"z": [{"b": None, "a": False}]}, '{"z":[{"a":false,"b":null}]}'),
    ],
)
def test_payload_is_canonical_json_with_sorted_keys_and_kept_array_order(
    payload: object, text: str
) -> None:
    assert canonical_json(payload) == text
    assert normalise(Job("a", payload)).payload_json == text


def test_nesting_of_64_containers_is_accepted() -> None:
    assert nested(1) == {} and nested(2) == {"a": []}
    assert canonical_json(nested(64)).count("{") + canonical_json(nested(64)).count("[") == 64


def test_nesting_of_65_containers_is_rejected() -> None:
    with pytest.raises(InvalidJob) as info:
        canonical_json(nested(65))
    assert str(info.value) == "payload nests deeper than 64 arrays/objects"


def test_a_self_referencing_payload_is_rejected_as_too_deep() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(InvalidJob, match="nests deeper than 64"):
        canonical_json(loop)


def _string_payload(size: int) -> str:
    """A JSON string value whose encoded form is exactly ``size`` bytes."""
    return "x" * (size - 2)


def test_payload_of_exactly_65535_bytes_is_accepted() -> None:
    assert len(canonical_json(_string_payload(MAX_PAYLOAD_BYTES)).encode()) == 65_535


def test_payload_of_65536_bytes_is_rejected_with_its_size() -> None:
    with pytest.raises(InvalidJob) as info:
        canonical_json(_string_payload(MAX_PAYLOAD_BYTES + 1))
    assert str(info.value) == "payload is 65536 bytes as JSON; the limit is 65535"


def test_payload_size_counts_utf8_bytes_not_characters() -> None:
    payload = "é" * 32_767  # 65,534 bytes of text + 2 quotes = 65,536
    with pytest.raises(InvalidJob, match="payload is 65536 bytes"):
        canonical_json(payload)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (float("nan"), "payload contains NaN or Infinity, which JSON cannot represent"),
        (float("inf"), "payload contains NaN or Infinity, which JSON cannot represent"),
        ({"a": [float("-inf")]}, "payload contains NaN or Infinity, which JSON cannot represent"),
        ({1: "a"}, "payload object keys must be strings (got int)"),
        ({"a": {None: 1}}, "payload object keys must be strings (got NoneType)"),
        ({(1, 2): 1}, "payload object keys must be strings (got tuple)"),
        (b"raw", "payload contains a bytes, which is not a JSON value"),
        (bytearray(b"raw"), "payload contains a bytearray, which is not a JSON value"),
        ({"a": {1, 2}}, "payload contains a set, which is not a JSON value"),
        (frozenset(), "payload contains a frozenset, which is not a JSON value"),
        (
            datetime(2026, 1, 1, tzinfo=UTC),
            "payload contains a datetime, which is not a JSON value",
        ),
        ([date(2026, 1, 1)], "payload contains a date, which is not a JSON value"),
        (Point(1), "payload contains a Point, which is not a JSON value"),
        (Colour.RED, "payload contains a Colour, which is not a JSON value"),
        (uuid.UUID(int=1), "payload contains a UUID, which is not a JSON value"),
        (decimal.Decimal("1.5"), "payload contains a Decimal, which is not a JSON value"),
        (object(), "payload contains a object, which is not a JSON value"),
        (2**63, "payload contains an integer outside the signed 64-bit range"),
        ([-(2**63) - 1], "payload contains an integer outside the signed 64-bit range"),
        (2**64, "payload contains an integer outside the signed 64-bit range"),
    ],
)
def test_payload_that_is_not_plain_json_is_rejected_by_name(payload: object, message: str) -> None:
    with pytest.raises(InvalidJob) as info:
        normalise(Job("a", payload))
    assert str(info.value) == message


def test_rejection_messages_never_repeat_the_payload() -> None:
    secret = "hunter2-secret"
    for payload in ({secret: float("nan")}, {"k": [secret, b"x"]}, {secret: "x" * 70_000}):
        with pytest.raises(InvalidJob) as info:
            canonical_json(payload)
        assert secret not in str(info.value)


def test_a_lone_surrogate_cannot_be_encoded_and_is_rejected() -> None:
    with pytest.raises(InvalidJob, match=r"^payload cannot be encoded as JSON"):
        canonical_json({"a": "\ud800"})


def test_invalid_job_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        canonical_json(float("nan"))


def test_canonical_text_decodes_to_the_same_value() -> None:
    payload = {"n": [1, 2.5, None, True, "ü"], "m": {"k": -3}}
    assert orjson.loads(canonical_json(payload)) == payload
