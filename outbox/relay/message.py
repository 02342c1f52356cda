"""One intent as a broker message: where it goes and what it carries, for every broker.

JetStream and Redis Streams carry the same job: the headers of ``codec.job_headers``
(on Redis, the entry's fields) and the payload's canonical JSON as the body (on Redis,
field ``data``). A keyed intent goes to its key's ordered partition (a key's order wins
over its priority); any other to the band of its priority. Each target turns the place
into its own name (a subject, a stream key).
"""

from __future__ import annotations

from outbox.db.rows import StoredIntent
from outbox.errors import ConfigurationError
from outbox.ids import is_node_id
from outbox.jetstream import codec, names


def headers(i: StoredIntent, now_ms: int) -> dict[str, str]:
    """The job headers of intent ``i``, handed off at ``now_ms``."""
    return codec.job_headers(
        i.message_id,
        str(i.job_name),
        i.max_attempts,
        int(i.available_at or 0),
        now_ms,
        trace_context=i.trace_context,
    )


def body(i: StoredIntent) -> str:
    """The message body: the payload's canonical JSON exactly as the outbox stored it
    (JetStream sends it encoded as UTF-8, Redis as its ``data`` field)."""
    return str(i.payload)


def ordered_partition(i: StoredIntent) -> int | None:
    """The ordered partition of a keyed intent; ``None`` for a keyless one (it goes to
    the band of ``band(i)``)."""
    return None if i.ordering_key is None else names.partition(str(i.ordering_key))


def band(i: StoredIntent) -> int:
    """The priority band of a keyless intent (0, the most urgent, to 9)."""
    return int(i.priority or 0)


def refuse_workflows(intents: list[StoredIntent]) -> None:
    """A workflow's node is never published (to JetStream or Redis): its dependents become
    due in its acknowledgement's database transaction, which a broker's acknowledgement
    is not (``outbox.workflows``). The batch rolls back, every row stays pending, and the relay
    stops with this one line; a relay with the SQL queue target hands them off."""
    node = next((i for i in intents if is_node_id(i.message_id)), None)
    if node is not None:
        raise ConfigurationError(
            f"intent {node.message_id} is a workflow node: workflows run on the SQL queue "
            "only (their nodes become due in a database transaction that a broker's ack "
            "is not); relay it without --target"
        )
