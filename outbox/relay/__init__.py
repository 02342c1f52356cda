"""The relay: committed intents in ``outbox_messages`` → a target (default: ``outbox_jobs``).

``Relay(database).run()`` drains what is pending; ``watch(stop)`` keeps relaying until
``stop`` is set; ``run_once()`` is one batch. The state machine and the handoff's
guarantees are described in ``outbox.relay.target``; operator actions (failed, retry,
prune) live in ``outbox.relay.admin``, the counts in ``outbox.status``.
"""

from outbox.db.rows import HandoffResult
from outbox.relay.service import Relay, RelayConfig
from outbox.relay.target import SqlQueueTarget, Target
from outbox.relay.totals import RunTotals

BatchResult = HandoffResult  # the name earlier releases exported

__all__ = [
    "BatchResult",
    "HandoffResult",
    "Relay",
    "RelayConfig",
    "RunTotals",
    "SqlQueueTarget",
    "Target",
]
