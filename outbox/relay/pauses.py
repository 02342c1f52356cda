"""How long the relay waits between batches when waiting is all it can do.

``Backoff`` doubles a wait up to a bound: an idle outbox, a failing database or broker.
``Deferred`` is the pause after a batch that claimed rows and moved none of them: each
waits for an older intent of its ordering key that another batch holds
(``outbox.db.ordering.in_turn``: another ``--in-flight`` lane, another relay). The next
batch would claim the same rows at once, so without it a drain, a lane or a watching
relay with a full batch of such rows spins on the database until that batch commits.
"""

from __future__ import annotations

from outbox.db.rows import HandoffResult

# The first pause after a batch that moved nothing: the batch it waits for is usually
# one round of publishing or one commit away.
DEFERRED_FIRST_S = 0.01


class Backoff:
    """Waits that double from ``low`` up to ``high``; ``reset`` goes back to ``low``."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high, self._next = low, high, low

    def next(self) -> float:
        value, self._next = self._next, min(self._next * 2, self.high)
        return value

    def reset(self) -> float:
        self._next = self.low
        return self.low


class Deferred:
    """The pause after each batch: 0 once a batch moved or quarantined anything, else
    from ``DEFERRED_FIRST_S`` doubling up to ``high`` while batches keep deferring."""

    def __init__(self, high: float) -> None:
        self._backoff = Backoff(min(DEFERRED_FIRST_S, high), high)

    def after(self, batch: HandoffResult) -> float:
        if not batch.claimed or batch.handed_off or batch.quarantined:
            self._backoff.reset()
            return 0.0
        return self._backoff.next()
