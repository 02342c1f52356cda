"""The producer's fast paths refuse and accept exactly what the general checks do.

``record()``/``push()`` check the usual shapes inline (plain dicts and lists of plain
scalars, names seen before, printable-ASCII keys without a regex, random bits read in
bulk); each test here pins one place where a shortcut could let something through.
"""

from __future__ import annotations

import enum
import os
import uuid

import orjson
import pytest

from outbox import Job
from outbox.errors import InvalidJob, InvalidKey
from outbox.ids import new_message_id
from outbox.job import canonical_json, key_digest, normalise

NAN = "payload contains NaN or Infinity, which JSON cannot represent"
RANGE = "payload contains an integer outside the signed 64-bit range"


class Level(enum.IntEnum):
    LOW = 1


class Tag(str):
    pass


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"a": 1, "b": float("nan")}, NAN),
        ([1.5, float("inf")], NAN),
        ((1, float("-inf")), NAN),
        ({"a": 2**63}, RANGE),
        ([-(2**63) - 1], RANGE),
        ({"a": [1, {"b": uuid.UUID(int=1)}]}, "payload contains a UUID, which is not a JSON value"),
        ({"a": "x", 2: "y"}, "payload object keys must be strings (got int)"),
        ([b"raw"], "payload contains a bytes, which is not a JSON value"),
        ({"a": {1.0}}, "payload contains a set, which is not a JSON value"),
    ],
)
def test_a_bad_value_inside_a_plain_container_is_refused_by_name(
    payload: object, message: str
) -> None:
    with pytest.raises(InvalidJob) as info:
        normalise(Job("a", payload))
    assert str(info.value) == message


def test_nesting_past_64_through_plain_dicts_is_refused() -> None:
    payload: object = 1
    for _ in range(65):
        payload = {"k": payload}
    with pytest.raises(InvalidJob, match="nests deeper than 64"):
        canonical_json(payload)


def test_the_first_bad_item_of_a_dict_is_the_one_named() -> None:
    with pytest.raises(InvalidJob) as info:
        canonical_json({"a": float("nan"), 1: "x"})
    assert str(info.value) == NAN


def test_subclasses_of_json_types_are_accepted_as_before() -> None:
    payload = {"level": Level.LOW, "tag": Tag("t"), "ok": True, "none": None, "f": 2.5}
    assert canonical_json(payload) == orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode()
    assert canonical_json([2**63 - 1, -(2**63)]) == "[9223372036854775807,-9223372036854775808]"


def test_a_bad_name_is_refused_after_a_good_one_was_remembered() -> None:
    normalise(Job("remembered.name", 1, queue="remembered"))
    with pytest.raises(InvalidJob, match="job name must be"):
        normalise(Job("remembered.name\n", 1))
    with pytest.raises(InvalidJob, match="queue name must be"):
        normalise(Job("remembered.name", 1, queue=Tag("bad queue")))


def test_the_checks_report_in_their_old_order() -> None:
    """A job with a bad payload and a bad max_attempts names the payload, as before."""
    with pytest.raises(InvalidJob, match="NaN"):
        normalise(Job("a", float("nan"), max_attempts=0))
    with pytest.raises(InvalidJob, match="priority"):
        normalise(Job("a", 1, priority=False))  # a bool is refused even though False == 0


@pytest.mark.parametrize("code", range(128))
def test_every_ascii_character_is_judged_as_printable_or_not(code: int) -> None:
    key = f"k{chr(code)}"
    if 0x20 <= code <= 0x7E:
        assert key_digest(key)
    else:
        with pytest.raises(InvalidKey, match="outside printable ASCII"):
            key_digest(key)


@pytest.mark.parametrize("key", ["é", "k\u00a0", "\u2028"])
def test_printable_characters_outside_ascii_are_refused(key: str) -> None:
    with pytest.raises(InvalidKey, match="outside printable ASCII"):
        key_digest(key)


def test_a_forked_child_never_reuses_the_parents_random_bits() -> None:
    new_message_id()  # the parent has read a batch of random bits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        bits = [str(uuid.UUID(new_message_id()).int & ((1 << 62) - 1)) for _ in range(20)]
        os.write(write, ",".join(bits).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = set(pipe.read().decode().split(","))
    os.waitpid(pid, 0)
    parent = {str(uuid.UUID(new_message_id()).int & ((1 << 62) - 1)) for _ in range(20)}
    assert len(child) == 20 and not child & parent
