"""What a relay's ``run`` or ``watch`` did, summed over its batches.

Its own module so that ``outbox.relay.inflight``, which sums its lanes' batches, and
``outbox.relay.service``, which runs them, both depend on it and not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from outbox.db.rows import HandoffResult


@dataclass(frozen=True, slots=True)
class RunTotals:
    """What ``run`` or ``watch`` did, summed over its batches."""

    batches: int = 0
    claimed: int = 0
    handed_off: int = 0
    quarantined: int = 0
    ms: float = 0.0

    def add(self, batch: HandoffResult) -> RunTotals:
        """These totals with one more batch counted in (a new value; totals are frozen)."""
        return RunTotals(
            batches=self.batches + 1,
            claimed=self.claimed + batch.claimed,
            handed_off=self.handed_off + batch.handed_off,
            quarantined=self.quarantined + batch.quarantined,
            ms=round(self.ms + batch.ms, 2),
        )
