"""NATS JetStream: where the queue goes when one database can no longer carry it.

The outbox stays in the application's database (``record()`` is unchanged); the relay
hands intents off to JetStream (``outbox.relay.jetstream``) and workers consume them
(``outbox.jetstream.worker``). This package holds what both sides share:

- ``connect``: the ``nats://`` URL, a quiet client (no tracebacks, bounded reconnects),
  and a synchronous bridge;
- ``names``: the fixed stream, subject and consumer names;
- ``codec``: a job and a dead letter as JetStream messages;
- ``publish``, ``wire``: a batch published at once, its PubAcks awaited together;
- ``provision``: ``--provisioning create|require``;
- ``admin``: ``outbox queue stats/failed/retry/forget/jobs/cancel --broker`` and
  ``status --target``;
- ``inbox``: exactly-once effects of transactional handlers (the ``outbox_inbox`` table);
- ``control``: pause/resume and cancel marks in a key-value bucket every worker watches;
- ``metrics``: ``outbox worker --broker --metrics-port``.

The guarantee: exactly once into the stream within the stream's duplicate window, at
least once beyond it; execution at least once, as on SQL; a transactional handler's
effects once per message id, through the inbox.
"""

# JetStream's own default duplicate window; the relay's --duplicate-window default.
DEFAULT_DUPLICATE_WINDOW_S = 120.0
# The most relay batches in flight at once (``--in-flight``): each holds a connection.
MAX_IN_FLIGHT = 8
