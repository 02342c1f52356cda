"""Operator actions on the outbox: status, the quarantine list, retry and prune.

Nothing here returns or logs a payload: status and lists carry ids, counts, reason
codes and times only. ``retry`` reads a payload to re-verify it, inside the database
transaction that requeues it, and never echoes it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import orjson

from outbox import results
from outbox.db.connection import Connection
from outbox.db.rows import FailedIntent, StoredIntent
from outbox.errors import (
    InvalidJob,
    InvalidMessageId,
    MessageNotFound,
    RetryRefused,
)
from outbox.ids import is_message_id
from outbox.job import canonical_json
from outbox.log import get_logger
from outbox.queue.broker import inbox
from outbox.relay.verify import reason_for, refingerprint

log = get_logger("outbox.relay")

DAY_MS = 86_400_000
# The version of ``Status.as_dict``'s shape (``outbox status --json``). Adding a key keeps
# it; renaming, removing or retyping one bumps it. README: "outbox status --json".
PRUNE_BATCH = 500


def failed(conn: Connection, limit: int = 50) -> list[FailedIntent]:
    """Quarantined intents, oldest first: id, reason code and times, never the payload."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return conn.driver.outbox_failed_list(limit)


def retry(
    conn: Connection, message_id: str, *, accept_current: bool = False
) -> Literal["requeued", "accepted"]:
    """Return a quarantined intent to pending once it verifies again.

    With ``accept_current`` the row's present contents are accepted: the payload is
    rewritten canonically and the fingerprint recomputed. Its names and JSON must still
    be valid. A producer replaying the original job under the same key afterwards gets
    ``IdempotencyConflict`` if the contents differ from what it recorded.
    """
    if not isinstance(message_id, str) or not is_message_id(message_id):
        raise InvalidMessageId(
            "not a message id: expected a UUID like 01890a5d-ac96-774b-bcce-b302099a8057"
        )
    # Ids are stored in lower case; PostgreSQL compares case-sensitively, MariaDB does not.
    wanted = message_id.lower()
    return conn.transact(lambda c: _retry(c, wanted, accept_current), operation="retry")


def _retry(
    conn: Connection, message_id: str, accept_current: bool
) -> Literal["requeued", "accepted"]:
    driver = conn.driver
    found = driver.outbox_retry_lookup_in_tx(message_id)
    if found is None:
        raise MessageNotFound(f"no outbox message {message_id}")
    if found.state != "failed":
        raise RetryRefused(
            f"message {message_id} is {found.state}, not failed; only failed ones retry"
        )
    intent = found.intent
    if not accept_current:
        canonical = _canonical(intent)
        reason = reason_for(canonical)
        if reason is not None:
            raise RetryRefused(_still_fails(message_id, reason))
        if canonical.payload == intent.payload:
            driver.outbox_requeue_in_tx(intent.id)
        else:  # stored canonically again, under the fingerprint it was recorded with
            driver.outbox_accept_in_tx(intent.id, canonical.payload, intent.fingerprint)
        log.info("relay.retry", message_id=message_id, accepted=False)
        return "requeued"
    try:
        payload, fingerprint = refingerprint(intent)
    except InvalidJob as exc:
        raise RetryRefused(
            f"message {message_id}: its current contents cannot be accepted ({exc})"
        ) from None
    driver.outbox_accept_in_tx(intent.id, payload, fingerprint)
    log.info("relay.retry", message_id=message_id, accepted=True)
    return "accepted"


def _canonical(intent: StoredIntent) -> StoredIntent:
    """The intent with its payload in canonical form, when it is JSON at all.

    The fingerprint covers the canonical payload, so a repair that is valid JSON but
    spaced or ordered differently (as an editor or ``jsonb`` writes it) still verifies.
    """
    if not isinstance(intent.payload, str):
        return intent
    try:
        payload = canonical_json(orjson.loads(intent.payload))
    except (orjson.JSONDecodeError, InvalidJob):
        return intent
    return replace(intent, payload=payload)


def _still_fails(message_id: str, reason: str) -> str:
    what = (
        "its job name, queue, payload, max_attempts or available_at differs from what was "
        "recorded (the payload is compared as canonical JSON: spacing and key order do not "
        "matter, values and types do); restore the recorded values"
        if reason == "fingerprint_mismatch"
        else "repair the row"
    )
    return (
        f"message {message_id} still does not verify ({reason}): {what}, or pass "
        "--accept-current to accept its current contents and re-fingerprint it"
    )


def prune(
    conn: Connection,
    days: int,
    limit: int = 1_000,
    *,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete at most ``limit`` keys recorded ``days`` or more days ago whose intents
    were handed off (``0``: every one handed off so far).

    Oldest first, ``batch`` rows per short transaction so no lock is held for long. The
    keys of pending and quarantined intents are never touched. Deleting a key ends
    deduplication for it: recording the same key again creates a new intent.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError("days must be a whole number >= 0")
    if limit < 1 or batch < 1:
        raise ValueError("limit and batch must be at least 1")
    deleted = 0
    while deleted < limit:
        want = min(batch, limit - deleted)
        n = conn.driver.outbox_prune(days * DAY_MS, want)
        deleted += n
        log.info("prune.batch", deleted=n)
        if progress is not None:
            progress(n)
        if n < want:
            break
    results.prune(conn)  # job results past their retention (outbox.results)
    inbox.prune(conn, days, limit, batch)  # the broker inbox's ids (their own count)
    return deleted


__all__ = ["FailedIntent", "failed", "prune", "retry"]
