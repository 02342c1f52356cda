"""Hostile input through record(): every value is either recorded and read back exactly
from the database, or rejected with InvalidKey/InvalidJob with the database unchanged.

The acceptance rules below are written from the design contract, independently of
``outbox.job``, so the product cannot agree with itself by construction.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox import Job, record
from outbox.errors import InvalidJob, InvalidKey
from tests.fixtures.fault_harness import placeholder

HYPOTHESIS = settings(
    max_examples=75,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
SQL_METACHARACTERS = [
    "'; DROP TABLE outbox_messages; --",
    '" OR 1=1 --',
    "%s %(x)s :key ? $1",
    "\\' \\\\ \\0 `x` /* */",
    "a%b_c[d]e^f",
    "x' UNION SELECT fingerprint FROM outbox_messages --",
]
_counter = itertools.count()
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e308, max_value=1e308)
    | st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308])
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=10), kids, max_size=5)
    ),
    max_leaves=25,
)


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, (list, tuple)):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


def must_reject(v: Any) -> bool:
    """The contract's rejections that need no encoder to decide."""
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return not -(2**63) <= v < 2**63
    if isinstance(v, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else []
    return any(must_reject(x) for x in items)


def same(a: Any, b: Any) -> bool:
    """JSON equality that tells 1 from 1.0 and True from 1, and keeps -0.0's sign."""
    if isinstance(a, tuple):
        a = list(a)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def valid_key(key: str) -> bool:
    return (
        0 < len(key) <= 200
        and all(0x20 <= ord(c) <= 0x7E for c in key)
        and not key.startswith("schedule:")
    )


class Probe:
    """Reads the caller's own transaction state, to prove a rejection wrote nothing."""

    def __init__(self, conn: Any, url: str) -> None:
        self.conn = conn
        self.ph = placeholder(url)

    def rows(self) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(
            "SELECT message_id, key_digest, fingerprint, payload FROM outbox_messages ORDER BY id"
        )
        return [tuple(r) for r in cur.fetchall()]

    def payload_of(self, message_id: str) -> str:
        cur = self.conn.cursor()
        cur.execute(
            f"SELECT payload FROM outbox_messages WHERE message_id = {self.ph}", (message_id,)
        )
        return str(cur.fetchall()[0][0])

    def attempt(self, key: str, job: Job) -> str | None:
        """record(); on a rejection assert nothing changed and the transaction still works."""
        before = self.rows()
        try:
            mid = record(self.conn, key, job)
        except (InvalidKey, InvalidJob):
            assert self.rows() == before
            self.conn.commit()
            assert self.rows() == before
            return None
        self.conn.commit()
        return mid


@pytest.fixture
def probe(app_conn: Any, db_url: str) -> Probe:
    return Probe(app_conn, db_url)


@HYPOTHESIS
@given(payload=json_values)
def test_payloads_round_trip_exactly_or_are_rejected(probe: Probe, payload: Any) -> None:
    mid = probe.attempt(f"payload:{next(_counter)}", Job("hostile.payload", payload))
    if mid is None:
        return
    assert not must_reject(payload)
    assert same(payload, json.loads(probe.payload_of(mid)))


@HYPOTHESIS
@given(depth=st.integers(1, 90), size=st.integers(65_400, 65_600), wide=st.booleans())
def test_deep_and_huge_payloads_obey_the_limits(
    probe: Probe, depth: int, size: int, wide: bool
) -> None:
    nested = _deep(depth)
    mid = probe.attempt(f"deep:{next(_counter)}", Job("hostile.deep", nested))
    assert (mid is not None) == (_depth(nested) <= 64)
    if mid is not None:
        assert same(nested, json.loads(probe.payload_of(mid)))

    text = ("é" * (size // 2)) if wide else ("x" * size)
    encoded = len(text.encode()) + 2
    mid = probe.attempt(f"huge:{next(_counter)}", Job("hostile.huge", text))
    assert (mid is not None) == (encoded <= 65_535)
    if mid is not None:
        assert json.loads(probe.payload_of(mid)) == text


@HYPOTHESIS
@given(
    key=st.text(max_size=220)
    | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=190, max_size=210)
    | st.sampled_from([*SQL_METACHARACTERS, "schedule:x", " ", "\x7f", "\t"])
)
def test_keys_are_stored_by_digest_literally_or_rejected(probe: Probe, key: str) -> None:
    job = Job("hostile.key", {"fixed": True})
    mid = probe.attempt(key, job)
    assert (mid is not None) == valid_key(key)
    if mid is None:
        return
    digest = hashlib.sha256(key.encode("ascii")).hexdigest()
    stored = [r for r in probe.rows() if r[0] == mid]
    assert len(stored) == 1 and stored[0][1] == digest
    assert record(probe.conn, key, job) == mid  # the replay finds it by the same digest
    probe.conn.commit()


@HYPOTHESIS
@given(name=st.text(max_size=210) | st.sampled_from(SQL_METACHARACTERS), as_queue=st.booleans())
def test_job_and_queue_names_outside_the_rules_are_rejected(
    probe: Probe, name: str, as_queue: bool
) -> None:
    job = Job("hostile.name", {}, queue=name) if as_queue else Job(name, {})
    mid = probe.attempt(f"name:{next(_counter)}", job)
    assert (mid is not None) == bool(_NAME.fullmatch(name))


@pytest.mark.parametrize("key", SQL_METACHARACTERS)
def test_sql_metacharacters_in_keys_never_reach_the_sql(probe: Probe, key: str) -> None:
    mid = probe.attempt(key, Job("hostile.key", {"k": key}))
    assert mid is not None
    assert json.loads(probe.payload_of(mid)) == {"k": key}
    assert len(probe.rows()) == 1
