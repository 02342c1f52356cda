"""One batch handed to a broker (JetStream or Redis), the part both targets share.

The driver claims and locks the batch, the target's ``publish`` hands the valid intents
to the broker and returns the message ids it acknowledged, and only those rows leave the
outbox, in the transaction that locked them (``Driver.outbox_handoff_published``). A
transient broker error drops the target's connection (the next batch reconnects) and
fails the batch, rolled back. Messages the broker refused (a stream at its limits) stay
pending; once the accepted rows are committed, ``TargetRefused`` names the batch's first
refusal, so a watching relay backs off (``Relay.watch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from outbox.db.driver import Driver
from outbox.db.rows import HandoffResult, OutboxHandoff, StoredIntent
from outbox.errors import BrokerError, TargetRefused
from outbox.relay.verify import reason_for


@dataclass(slots=True)
class Refusal:
    """The batch's first refusal: the stream, the limit it is at, the intents held back."""

    stream: str
    limit: str
    count: int = 0


def note(refused: list[Refusal], stream: str, limit: str, count: int = 1) -> None:
    """``count`` more intents stay pending; the first refusal's stream and limit are kept."""
    if not refused:
        refused.append(Refusal(stream, limit))
    refused[0].count += count


def handoff(
    driver: Driver,
    batch: OutboxHandoff,
    publish: Callable[[list[StoredIntent], list[Refusal]], set[str]],
    drop: Callable[[], None],
    why: Callable[[Refusal], str],
) -> HandoffResult:
    """Hand ``batch`` off through ``publish``; ``drop`` the connection on a transient
    error; ``why`` says, after ``stream <name>``, what a refusal was."""
    refused: list[Refusal] = []
    try:
        result = driver.outbox_handoff_published(
            batch, reason_for, lambda intents: publish(intents, refused)
        )
    except BrokerError as exc:
        if exc.transient:
            drop()
        raise
    if refused:
        r = refused[0]
        raise TargetRefused(
            f"stream {r.stream} {why(r)}: {r.count} intents stay pending",
            stream=r.stream,
            limit=r.limit,
            handed_off=result.handed_off,
        )
    return result
