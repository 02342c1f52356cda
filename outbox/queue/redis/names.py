"""The fixed key names on Redis, so operators, the relay and every worker agree on them.

Every key of queue ``search`` sits under one hash tag, ``{outbox:search}``, so on Redis
Cluster all of a queue's keys live on one node and one script may touch any of them:

- ``{outbox:search}:jobs:<band>``: the stream of priority band 0 (most urgent) to 9;
- ``{outbox:search}:ord:<p>``: the stream of ordered partition ``p`` (jobs with an
  ordering key; ``outbox.jetstream.names.partition`` picks ``p``, the same digest as on
  JetStream, so a key's jobs keep their order);
- ``{outbox:search}:held``: a hash, per ordered partition ``p``, of the one delivery of
  ``p`` kept out while it waits (a keyed retry's backoff, a snooze, a hand-back): its
  entry id, when it is due, the delivery count it gets back and its snooze count
  (``outbox.queue.redis.ordered``);
- ``{outbox:search}:ord:wake``: a stream of one entry, added to whenever an ordered
  partition may have a job for an idle worker (the relay added one, or a partition was
  released with entries behind): idle workers block on it;
- ``{outbox:search}:dead``: the dead-letter stream (kept until forgotten or re-driven);
- ``{outbox:search}:seen:<msg id>``: the de-duplication marker of one published message,
  with a TTL (the window);
- ``{outbox:search}:paused``: present while the queue is paused;
- ``{outbox:search}:delayed``: a sorted set of jobs waiting to come back (a retry's
  backoff, a snooze, a job handed off before it is due), scored by when they are due in
  UNIX ms; a worker moves each back to its stream when due (``outbox.queue.redis.scripts``);
- consumer group ``outbox-workers`` on every job stream, shared by every worker process.

An entry's fields are the JetStream headers of the same job
(``outbox.jetstream.codec.job_headers``) plus ``data``, the JSON body JetStream carries,
so one codec serves both brokers.
"""

from __future__ import annotations

from outbox.jetstream.names import BANDS, ORDERED_PARTITIONS, partition

__all__ = [
    "BANDS",
    "DATA_FIELD",
    "GROUP",
    "ORDERED_PARTITIONS",
    "band_streams",
    "cancel_key",
    "dead_stream",
    "delayed_key",
    "held_key",
    "job_streams",
    "ordered_stream",
    "ordered_streams",
    "partition",
    "paused_key",
    "seen_key",
    "stream",
    "tag",
    "wake_stream",
]

GROUP = "outbox-workers"
DATA_FIELD = "data"


def tag(queue: str) -> str:
    """The hash tag every key of ``queue`` starts with (queue names, checked by
    ``outbox.job.check_name``, cannot hold ``{`` or ``}``, which would end it early)."""
    return "{outbox:" + queue + "}"


def stream(queue: str, priority: int = 0) -> str:
    """The stream ``queue``'s unordered jobs of ``priority`` go to."""
    return f"{tag(queue)}:jobs:{priority}"


def band_streams(queue: str) -> list[str]:
    """Every band's stream of ``queue``, the most urgent first."""
    return [stream(queue, p) for p in BANDS]


def ordered_stream(queue: str, part: int) -> str:
    """The stream of ``queue``'s keyed jobs in partition ``part``."""
    return f"{tag(queue)}:ord:{part}"


def ordered_streams(queue: str) -> list[str]:
    """Every ordered partition's stream of ``queue``."""
    return [ordered_stream(queue, p) for p in range(ORDERED_PARTITIONS)]


def job_streams(queue: str) -> list[str]:
    """Every stream a worker of ``queue`` reads: the bands, then the partitions."""
    return band_streams(queue) + ordered_streams(queue)


def dead_stream(queue: str) -> str:
    """The dead-letter stream of ``queue``."""
    return f"{tag(queue)}:dead"


def seen_key(queue: str, msg_id: str) -> str:
    """The de-duplication marker of message ``msg_id`` (the ``Nats-Msg-Id`` of the same
    job on JetStream)."""
    return f"{tag(queue)}:seen:{msg_id}"


def paused_key(queue: str) -> str:
    """Present while ``queue`` is paused on Redis."""
    return f"{tag(queue)}:paused"


def delayed_key(queue: str) -> str:
    """The sorted set of ``queue``'s jobs waiting to come back (retries, snoozes, early
    deliveries), scored by their due time in UNIX ms."""
    return f"{tag(queue)}:delayed"


def held_key(queue: str) -> str:
    """The hash of ``queue``'s ordered deliveries kept out while they wait, by partition."""
    return f"{tag(queue)}:held"


def wake_stream(queue: str) -> str:
    """The stream idle workers of ``queue``'s keyed jobs block on."""
    return f"{tag(queue)}:ord:wake"


def cancel_key(queue: str) -> str:
    """The hash of ``queue``'s jobs an operator cancelled while a worker held them, by
    message id: their workers learn of it with their next lease renewal, and an ack of
    one records the cancellation instead (``outbox.queue.redis.lane``)."""
    return f"{tag(queue)}:cancel"
