"""The fixed names on JetStream, so operators and tools can rely on them.

For queue ``search``:

- stream ``OUTBOX_search`` (work-queue retention) on subject ``outbox.jobs.search``;
- dead-letter stream ``OUTBOX_DEAD_search`` (limits retention: kept until forgotten or
  re-driven) on subject ``outbox.dead.search``;
- durable pull consumer ``outbox-workers`` on the queue's stream, shared by every
  worker process of that queue, so JetStream spreads the messages over them;
- priorities 1 to 9 (``Job(priority=)``): subjects ``outbox.prio.<p>.search`` in the
  same stream, each band with its consumer ``outbox-workers-p<p>``; a stream made
  before priorities has the first subject only, and every job goes there;
- jobs with an ordering key: subjects ``outbox.ord.<p>.search`` in the same stream, one
  per partition ``p`` of ``ORDERED_PARTITIONS`` (a stable digest of the key picks it),
  each with its consumer ``outbox-workers-o<p>`` that has one message in flight at a
  time, so one key's jobs run one at a time, in stream order
  (``outbox.jetstream.ordered``).

A stream name may not contain ``.``, which queue names may: there it is written ``_``
and a short digest of the real name is appended (``OUTBOX_mail_eu-3f2a9c``), so two
queue names never share a stream. The subject keeps the queue name as it is.
"""

from __future__ import annotations

import hashlib

STREAM_PREFIX = "OUTBOX_"
DEAD_PREFIX = "OUTBOX_DEAD_"
JOBS_SUBJECT = "outbox.jobs."
DEAD_SUBJECT = "outbox.dead."
PRIO_SUBJECT = "outbox.prio."
ORDERED_SUBJECT = "outbox.ord."
CONSUMER = "outbox-workers"
BANDS = range(10)  # priorities 0 (most urgent) to 9
# Fixed, not a setting: the relay and every worker must agree on a key's partition. It
# bounds how many keys run at once per queue (and a key's backoff holds its partition).
ORDERED_PARTITIONS = 16


def _safe(queue: str) -> str:
    if "." not in queue:
        return queue
    digest = hashlib.sha256(queue.encode()).hexdigest()[:6]
    return f"{queue.replace('.', '_')}-{digest}"


def stream(queue: str) -> str:
    """The work-queue stream of ``queue``."""
    return STREAM_PREFIX + _safe(queue)


def dead_stream(queue: str) -> str:
    """The dead-letter stream of ``queue``."""
    return DEAD_PREFIX + _safe(queue)


def subject(queue: str, priority: int = 0) -> str:
    """The subject the relay publishes ``queue``'s jobs of ``priority`` on: priority 0
    on ``outbox.jobs.<queue>``, 1 to 9 on ``outbox.prio.<p>.<queue>`` (the band before
    the queue, so a queue name with ``.`` never reads as another's band)."""
    return JOBS_SUBJECT + queue if priority == 0 else f"{PRIO_SUBJECT}{priority}.{queue}"


def band_subjects(queue: str) -> list[str]:
    """Every band's subject of ``queue``, the most urgent first."""
    return [subject(queue, p) for p in BANDS]


def partition(ordering_key: str) -> int:
    """The partition of ``ordering_key`` (as the outbox stores it: the key's digest), the
    same on every host and Python version."""
    digest = hashlib.sha256(ordering_key.encode()).digest()
    return int.from_bytes(digest[:4], "big") % ORDERED_PARTITIONS


def ordered_subject(queue: str, part: int) -> str:
    """The subject of ``queue``'s keyed jobs in partition ``part``."""
    return f"{ORDERED_SUBJECT}{part}.{queue}"


def ordered_subjects(queue: str) -> list[str]:
    """Every partition's subject of ``queue``."""
    return [ordered_subject(queue, p) for p in range(ORDERED_PARTITIONS)]


def ordered_consumer(part: int) -> str:
    """The durable consumer of one ordered partition."""
    return f"{CONSUMER}-o{part}"


def is_ordered(subject_name: str) -> bool:
    """Is ``subject_name`` an ordered partition's (a keyed job's)?"""
    return subject_name.startswith(ORDERED_SUBJECT)


def consumer(priority: int = 0) -> str:
    """The durable consumer of one band (band 0 keeps the name it always had)."""
    return CONSUMER if priority == 0 else f"{CONSUMER}-p{priority}"


def band_of_subject(subject_name: str) -> int:
    """``outbox.prio.3.search`` → 3; any other subject → 0."""
    if subject_name.startswith(PRIO_SUBJECT):
        return int(subject_name[len(PRIO_SUBJECT)])
    return 0


def dead_subject(queue: str) -> str:
    """The subject dead letters of ``queue`` are kept on."""
    return DEAD_SUBJECT + queue


def queue_of_subject(subject_name: str) -> str | None:
    """``outbox.jobs.search`` → ``search``; None for a subject that is not a queue's."""
    for prefix in (JOBS_SUBJECT, DEAD_SUBJECT):
        if subject_name.startswith(prefix):
            return subject_name[len(prefix) :] or None
    return None
