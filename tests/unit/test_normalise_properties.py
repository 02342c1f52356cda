"""Properties of normalisation over generated JSON values (hypothesis)."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox.job import Job, canonical_json, fingerprint, normalise

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
)
_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=25,
)
SETTINGS = settings(max_examples=100, deadline=None)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys inserted in a random order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def as_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: as_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(as_tuples(v) for v in value)
    return value


@SETTINGS
@given(json_values, st.randoms(use_true_random=False))
def test_equal_values_in_any_key_order_give_one_fingerprint(value: Any, rng: random.Random) -> None:
    a = normalise(Job("a", value, queue="q"))
    b = normalise(Job("a", shuffled(value, rng), queue="q"))
    assert a.payload_json == b.payload_json
    assert fingerprint(a, None) == fingerprint(b, None)


@SETTINGS
@given(json_values)
def test_canonical_form_round_trips(value: Any) -> None:
    assert orjson.loads(canonical_json(value)) == value


@SETTINGS
@given(json_values)
def test_tuples_normalise_as_lists(value: Any) -> None:
    assert canonical_json(as_tuples(value)) == canonical_json(value)


@SETTINGS
@given(json_values)
def test_canonical_json_is_idempotent(value: Any) -> None:
    once = canonical_json(value)
    assert canonical_json(orjson.loads(once)) == once
