"""The fixed names on JetStream, so operators and tools can rely on them.

For queue ``search``:

- stream ``OUTBOX_search`` (work-queue retention) on subject ``outbox.jobs.search``;
- dead-letter stream ``OUTBOX_DEAD_search`` (limits retention: kept until forgotten or
  re-driven) on subject ``outbox.dead.search``;
- durable pull consumer ``outbox-workers`` on the queue's stream, shared by every
  worker process of that queue, so JetStream spreads the messages over them.

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
CONSUMER = "outbox-workers"


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


def subject(queue: str) -> str:
    """The subject the relay publishes ``queue``'s jobs on."""
    return JOBS_SUBJECT + queue


def dead_subject(queue: str) -> str:
    """The subject dead letters of ``queue`` are kept on."""
    return DEAD_SUBJECT + queue


def queue_of_subject(subject_name: str) -> str | None:
    """``outbox.jobs.search`` → ``search``; None for a subject that is not a queue's."""
    for prefix in (JOBS_SUBJECT, DEAD_SUBJECT):
        if subject_name.startswith(prefix):
            return subject_name[len(prefix) :] or None
    return None
