"""The relay: committed intents in ``outbox_messages`` → jobs in ``outbox_jobs``.

``Relay(database).run()`` drains what is pending; ``watch(stop)`` keeps relaying until
``stop`` is set; ``run_once()`` is one batch. The state machine and the handoff's
guarantees are described in ``outbox.relay.handoff``; operator actions (status,
failed, retry, prune) live in ``outbox.relay.admin``.
"""

from outbox.relay.handoff import BatchResult
from outbox.relay.service import Relay, RelayConfig, RunTotals

__all__ = ["BatchResult", "Relay", "RelayConfig", "RunTotals"]
