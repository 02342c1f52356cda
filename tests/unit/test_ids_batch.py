"""A batch's message ids (``new_message_ids``): the same ids ``new_message_id`` makes one
by one, made under one lock and one clock read for ``record_many`` and ``push_many``."""

from __future__ import annotations

import time
import uuid

import pytest

from outbox import ids
from outbox.ids import new_message_id, new_message_ids


def test_a_batch_is_canonical_uuid_version_7_with_the_rfc_variant() -> None:
    made = new_message_ids(1_000)
    for text in made:
        value = uuid.UUID(text)
        assert str(value) == text and len(text) == 36
        assert value.version == 7 and value.variant == uuid.RFC_4122
    assert {text[19] for text in made} == set("89ab")  # two random bits beside the variant


def test_a_batch_carries_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    stamps = {uuid.UUID(t).int >> 80 for t in new_message_ids(50)}
    after = time.time_ns() // 1_000_000
    assert all(before <= s <= after for s in stamps)


def test_batches_and_single_ids_increase_together() -> None:
    made = [new_message_id(), *new_message_ids(3_000), new_message_id(), *new_message_ids(1)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_a_batch_past_4096_in_one_millisecond_borrows_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ids, "_last_ms", ids._last_ms)
    monkeypatch.setattr(ids, "_last_counter", ids._last_counter)
    monkeypatch.setattr(ids.time, "time_ns", lambda: 4_000_000_000_000 * 1_000_000)
    made = new_message_ids(5_000)
    assert made == sorted(made) and len(set(made)) == len(made)
    stamps = [uuid.UUID(t).int >> 80 for t in made]
    assert stamps[0] == 4_000_000_000_000 and stamps[-1] == 4_000_000_000_001


def test_the_random_bits_differ_between_ids() -> None:
    tails = [t[19:] for t in new_message_ids(1_000)]
    assert len(set(tails)) == len(tails)
