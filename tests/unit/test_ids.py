"""Message ids: UUIDv7 strings, time-ordered, strictly increasing within a process."""

from __future__ import annotations

import time
import uuid

import pytest

from outbox import ids
from outbox.ids import is_message_id, new_message_id


def test_message_id_is_a_canonical_uuid_version_7() -> None:
    text = new_message_id()
    value = uuid.UUID(text)
    assert str(value) == text and len(text) == 36
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_message_id_carries_the_current_unix_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    stamp = uuid.UUID(new_message_id()).int >> 80
    after = time.time_ns() // 1_000_000
    assert before <= stamp <= after


def test_ids_made_in_one_process_strictly_increase() -> None:
    made = [new_message_id() for _ in range(20_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


@pytest.fixture
def restore_id_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that fake the clock leave the generator's memory as they found it."""
    monkeypatch.setattr(ids, "_last_ms", ids._last_ms)
    monkeypatch.setattr(ids, "_last_counter", ids._last_counter)


def test_ids_keep_increasing_when_the_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch, restore_id_state: None
) -> None:
    first = new_message_id()
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_000_000_000 * 1_000_000)  # 2001
    assert first < new_message_id() < new_message_id()


def test_ids_borrow_the_next_millisecond_after_4096_in_one(
    monkeypatch: pytest.MonkeyPatch, restore_id_state: None
) -> None:
    frozen = (time.time_ns() // 1_000_000 + 10_000) * 1_000_000
    monkeypatch.setattr(ids.time, "time_ns", lambda: frozen)
    made = [new_message_id() for _ in range(5_000)]
    assert made == sorted(made) and len(set(made)) == 5_000
    stamps = {uuid.UUID(m).int >> 80 for m in made}
    assert min(stamps) == frozen // 1_000_000 and max(stamps) == min(stamps) + 1


def test_ids_from_a_later_millisecond_sort_after_earlier_ones() -> None:
    early = new_message_id()
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == start:
        pass
    assert new_message_id() > early


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("0190a6e2-7b3c-7d4e-8f00-123456789abc", True),
        ("0190A6E2-7B3C-7D4E-8F00-123456789ABC", True),
        ("0190a6e27b3c7d4e8f00123456789abc", False),
        ("{0190a6e2-7b3c-7d4e-8f00-123456789abc}", False),
        ("urn:uuid:0190a6e2-7b3c-7d4e-8f00-123456789abc", False),
        ("0190a6e2-7b3c-7d4e-8f00-123456789ab", False),
        ("", False),
        ("not-a-uuid", False),
    ],
)
def test_is_message_id_accepts_only_the_36_character_form(text: str, ok: bool) -> None:
    assert is_message_id(text) is ok


def test_is_message_id_refuses_non_strings() -> None:
    assert is_message_id(123) is False  # type: ignore[arg-type]
    assert is_message_id(None) is False  # type: ignore[arg-type]
