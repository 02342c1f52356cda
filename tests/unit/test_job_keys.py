"""Idempotency key rules: printable ASCII, 1-200 bytes, ``schedule:`` reserved."""

from __future__ import annotations

import hashlib

import pytest

from outbox.errors import InvalidKey
from outbox.job import key_digest


def test_key_digest_is_the_sha256_hex_of_the_ascii_key() -> None:
    assert key_digest("note:1:revision:2") == hashlib.sha256(b"note:1:revision:2").hexdigest()


@pytest.mark.parametrize("key", ["a", "x" * 200, " ", "~", "".join(map(chr, range(0x20, 0x7F)))])
def test_key_accepts_printable_ascii_of_1_to_200_bytes(key: str) -> None:
    assert len(key_digest(key)) == 64


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "key is empty; it must be 1-200 bytes of printable ASCII (0x20-0x7E)"),
        ("x" * 201, "key is 201 bytes; the limit is 200"),
        ("note:é", "key has a character outside printable ASCII (0x20-0x7E) at index 5 (U+00E9)"),
        ("a\tb", "key has a character outside printable ASCII (0x20-0x7E) at index 1 (U+0009)"),
        ("ab\n", "key has a character outside printable ASCII (0x20-0x7E) at index 2 (U+000A)"),
        ("\x7f", "key has a character outside printable ASCII (0x20-0x7E) at index 0 (U+007F)"),
        ("\x00", "key has a character outside printable ASCII (0x20-0x7E) at index 0 (U+0000)"),
        (
            "k\U0001f600",
            "key has a character outside printable ASCII (0x20-0x7E) at index 1 (U+1F600)",
        ),
    ],
)
def test_key_rejection_names_what_is_wrong(key: str, message: str) -> None:
    with pytest.raises(InvalidKey) as info:
        key_digest(key)
    assert str(info.value) == message


@pytest.mark.parametrize("key", [b"note:1", 1, None, ["note:1"]])
def test_key_must_be_a_str(key: object) -> None:
    with pytest.raises(InvalidKey, match=rf"^key must be a str \(got {type(key).__name__}\)$"):
        key_digest(key)


def test_key_with_the_reserved_scheduler_prefix_is_rejected() -> None:
    with pytest.raises(InvalidKey) as info:
        key_digest("schedule:nightly:2026-01-01")
    assert str(info.value) == "the key prefix 'schedule:' is reserved for the scheduler"


def test_reserved_prefix_is_case_sensitive_and_only_a_prefix() -> None:
    assert key_digest("Schedule:nightly")
    assert key_digest("note:schedule:1")


def test_invalid_key_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        key_digest("")
