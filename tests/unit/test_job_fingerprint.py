"""The fingerprint's byte layout, pinned by known answers so SQL can recompute it."""

from __future__ import annotations

import hashlib

from outbox.job import Job, fingerprint, normalise


def test_fingerprint_known_answer_with_every_field_set() -> None:
    job = normalise(Job("notes.index", {"b": [2, 1], "a": "é"}, queue="search", max_attempts=5))
    layout = 'v1\nnotes.index\nsearch\n5\n1700000000000\n{"a":"é","b":[2,1]}'.encode()
    assert fingerprint(job, 1_700_000_000_000) == hashlib.sha256(layout).hexdigest()
    assert (
        fingerprint(job, 1_700_000_000_000)
        == "46ee42ec33d1646456c0f2a1a37bdd896ccbb8697ccd23c3cc3a88fac422ab7c"
    )


def test_fingerprint_known_answer_with_defaults_leaves_empty_fields() -> None:
    job = normalise(Job("a"))
    assert fingerprint(job, None) == hashlib.sha256(b"v1\na\ndefault\n\n\nnull").hexdigest()
    assert fingerprint(job, None) == (
        "e673397107cdb9a60db2fd79963b27707fd115737f1d166f7fab41cc857011fd"
    )


def test_every_part_of_the_job_changes_the_fingerprint() -> None:
    base = Job("a", {"x": 1}, queue="q", max_attempts=3)
    variants = [
        base,
        Job("b", {"x": 1}, queue="q", max_attempts=3),
        Job("a", {"x": 2}, queue="q", max_attempts=3),
        Job("a", {"x": 1}, queue="r", max_attempts=3),
        Job("a", {"x": 1}, queue="q", max_attempts=4),
        Job("a", {"x": 1}, queue="q", max_attempts=None),
    ]
    prints = {fingerprint(normalise(j), None) for j in variants}
    prints.add(fingerprint(normalise(base), 1_000))
    assert len(prints) == len(variants) + 1


def test_array_order_matters_but_key_order_does_not() -> None:
    def fp(payload: object) -> str:
        return fingerprint(normalise(Job("a", payload)), None)

    assert fp({"a": 1, "b": 2}) == fp({"b": 2, "a": 1})
    assert fp([1, 2]) != fp([2, 1])
    assert fp((1, 2)) == fp([1, 2])
