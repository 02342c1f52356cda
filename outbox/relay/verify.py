"""Re-verifying a stored intent in Python, by the same rules as the relay's SQL.

The relay verifies rows inside the database (no payload leaves it on the hot path);
this module is the reference those SQL checks mirror, and it is used where SQL cannot
do the job: a PostgreSQL batch holding a payload that is not JSON (the ``::json``
cast raises instead of answering), ``outbox retry``, and ``RelayConfig(verify_in_python=
True)``. A conformance test checks that both give the same reason for every corruption.

Reason codes, in the order they are tested (the first that applies wins):

====================  =========================================================
``invalid_json``      payload missing or not JSON text
``invalid_name``      job name breaks ``NAME_PATTERN``
``invalid_queue``     queue name breaks ``NAME_PATTERN``
``invalid_max_attempts``  not NULL and not 1..1000
``invalid_available_at``  negative (or not an integer)
``payload_too_large`` payload over 65,535 bytes
``fingerprint_mismatch``  the stored fingerprint does not recompute from the row
====================  =========================================================

The priority has no reason of its own: it is sealed in the fingerprint (for any value
but 0), so a priority changed after recording is a ``fingerprint_mismatch``; so is the
ordering key (its digest, whenever set).
"""

from __future__ import annotations

import orjson

from outbox.db.rows import StoredIntent
from outbox.errors import InvalidJob
from outbox.job import (
    MAX_ATTEMPTS_LIMIT,
    MAX_PAYLOAD_BYTES,
    NAME_PATTERN,
    NormalJob,
    canonical_json,
    fingerprint,
)

REASONS = (
    "invalid_json",
    "invalid_name",
    "invalid_queue",
    "invalid_max_attempts",
    "invalid_available_at",
    "payload_too_large",
    "fingerprint_mismatch",
)


def reason_for(row: StoredIntent) -> str | None:
    """The reason code ``row`` must be quarantined for, or ``None`` when it verifies."""
    return _content_reason(row) or (
        None if _fingerprint_of(row) == row.fingerprint else "fingerprint_mismatch"
    )


def _content_reason(row: StoredIntent) -> str | None:
    if not isinstance(row.payload, str) or not _is_json(row.payload):
        return "invalid_json"
    if not _is_name(row.job_name):
        return "invalid_name"
    if not _is_name(row.queue):
        return "invalid_queue"
    if row.max_attempts is not None and not (
        _is_int(row.max_attempts) and 1 <= row.max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        return "invalid_max_attempts"
    if row.available_at is not None and not (_is_int(row.available_at) and row.available_at >= 0):
        return "invalid_available_at"
    if len(row.payload.encode("utf-8", "surrogatepass")) > MAX_PAYLOAD_BYTES:
        return "payload_too_large"
    return None


def refingerprint(row: StoredIntent) -> tuple[str, str]:
    """Canonical payload and new fingerprint for a row whose contents are accepted as is.

    Raises ``InvalidJob`` naming the reason code of the first rule the contents break:
    accepting a row cannot make bad JSON or a bad name valid, only re-seal good content.
    """
    reason = _content_reason(row)
    if reason is not None:
        raise InvalidJob(reason)
    payload = canonical_json(orjson.loads(row.payload))
    normal = NormalJob(
        row.job_name, row.queue, payload, row.max_attempts, _priority(row), _ordering(row)
    )
    return payload, fingerprint(normal, row.available_at)


def _fingerprint_of(row: StoredIntent) -> str:
    normal = NormalJob(
        row.job_name, row.queue, row.payload, row.max_attempts, _priority(row), _ordering(row)
    )
    return fingerprint(normal, row.available_at)


def _priority(row: StoredIntent) -> int:
    """The row's priority as the fingerprint reads it; a value no producer writes
    (outside 0..9, not an int) is sealed as is, so it can only mismatch."""
    value = row.priority
    return value if _is_int(value) else -1


def _ordering(row: StoredIntent) -> str | None:
    """The row's ordering key digest as the fingerprint reads it (text, or None)."""
    return None if row.ordering_key is None else str(row.ordering_key)


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _is_name(value: object) -> bool:
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
