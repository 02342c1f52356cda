"""How a job and a dead letter look on JetStream.

A job is one message on ``outbox.jobs.<queue>``: the body is the payload's canonical
JSON exactly as the outbox stored it, and the rest rides in headers::

    Nats-Msg-Id           the outbox message id, exactly (JetStream's dedupe key)
    Outbox-Message-Id     the message id again; a re-driven dead letter keeps this one
                          while its Nats-Msg-Id is new
    Outbox-Job            job name
    Outbox-Max-Attempts   the recorded max_attempts, or empty (the registry decides)
    Outbox-Available-At   UNIX ms the job is due (0: now)
    Outbox-Created-At     UNIX ms the relay handed it off
    Outbox-Snoozes        only on a snoozed job's message: how often it was snoozed
    Outbox-Attempts-Before  only there too: attempts spent before this message, which
                          decoding adds to JetStream's delivery count
    traceparent           only for a job recorded inside a span: W3C Trace Context
    tracestate            (outbox.tracing), the attempt span's parent

A handler's ``Snooze(seconds)`` re-publishes its job as a new message (same body and
message id, due ``seconds`` later, ``Outbox-Snoozes`` one more, the attempts so far less
the snoozed one) under ``Nats-Msg-Id`` ``<message id>:snooze:<sequence>`` of the message
it replaces, then terminates that one: a worker that dies between the two publishes the
same key again when the old message comes back, and JetStream drops the copy. A message
without these headers decodes exactly as before.

A dead letter is one message on ``outbox.dead.<queue>`` whose body is a JSON object with
the job, its attempts and the exception's class, message and trace: the only place the
message and trace are kept. Its ``Nats-Msg-Id`` is ``dead:<stream>:<sequence>`` of the
job message it copies, so a worker that dies between the copy and the terminate copies
it once. A message on a queue's subject that is not ours (no ``Outbox-Job`` header, a
bad name, a body that is not JSON) becomes a dead letter too, never a crash.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from outbox import tracing
from outbox.db.rows import ClaimedJob, Failure
from outbox.job import MAX_ATTEMPTS_LIMIT, NAME_PATTERN

MSG_ID = "Nats-Msg-Id"
MESSAGE_ID = "Outbox-Message-Id"
JOB = "Outbox-Job"
MAX_ATTEMPTS = "Outbox-Max-Attempts"
AVAILABLE_AT = "Outbox-Available-At"
CREATED_AT = "Outbox-Created-At"
SNOOZES = "Outbox-Snoozes"
ATTEMPTS_BEFORE = "Outbox-Attempts-Before"
FOREIGN_CLASS = "outbox.jetstream.ForeignMessage"


# The canonical form, as the outbox writes ids: a match is a UUID without building one.
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


class ForeignMessage(Exception):
    """A message on a queue's subject that the outbox did not publish."""


def job_headers(
    message_id: str,
    job_name: str,
    max_attempts: int | None,
    available_at_ms: int,
    created_at_ms: int,
    *,
    msg_id: str | None = None,
    snoozes: int = 0,
    attempts_before: int = 0,
    trace_context: str | None = None,
) -> dict[str, str]:
    """The headers of one job message; ``msg_id`` only when re-driving or snoozing (a new
    dedupe key), ``snoozes`` and ``attempts_before`` only when snoozing, the W3C headers
    only with a recorded ``trace_context``."""
    headers = {
        MSG_ID: msg_id or message_id,
        MESSAGE_ID: message_id,
        JOB: job_name,
        MAX_ATTEMPTS: "" if max_attempts is None else str(max_attempts),
        AVAILABLE_AT: str(available_at_ms),
        CREATED_AT: str(created_at_ms),
    }
    if snoozes:
        headers[SNOOZES] = str(snoozes)
    if attempts_before:
        headers[ATTEMPTS_BEFORE] = str(attempts_before)
    if trace_context:
        headers.update(tracing.headers(trace_context))
    return headers


def headers_of(
    job: ClaimedJob,
    due_ms: int,
    *,
    snoozes: int,
    attempts_before: int,
    msg_id: str | None = None,
) -> dict[str, str]:
    """``job_headers`` of ``job`` sent again (a snooze, a retry on Redis), due at
    ``due_ms``, with its snoozes and the attempts spent before the new message."""
    return job_headers(
        job.message_id,
        job.job_name,
        job.max_attempts,
        due_ms,
        job.created_at,
        msg_id=msg_id,
        snoozes=snoozes,
        attempts_before=attempts_before,
        trace_context=job.trace_context,
    )


def snooze_count(headers: dict[str, str] | None) -> int:
    """How often the job a message carries was snoozed (0 without the header)."""
    h = headers or {}
    return _int(h, SNOOZES) if SNOOZES in h else 0


def _int(headers: dict[str, str], name: str) -> int:
    value = headers.get(name, "")
    if not value.isdigit():
        raise ForeignMessage(f"header {name} is missing or not a whole number")
    return int(value)


def decode_job(
    queue: str, seq: int, attempt: int, headers: dict[str, str] | None, data: bytes
) -> ClaimedJob:
    """The job a message carries; ``ForeignMessage`` when it is not one of ours. Its
    attempt is ``attempt`` (the delivery count) plus the attempts spent before this
    message (a snoozed job's)."""
    h = headers or {}
    message_id, job_name = h.get(MESSAGE_ID, ""), h.get(JOB, "")
    if not _CANONICAL_UUID.fullmatch(message_id):
        try:  # any other form uuid.UUID takes is accepted, as before
            uuid.UUID(message_id)
        except ValueError:
            raise ForeignMessage(f"header {MESSAGE_ID} is missing or not a UUID") from None
    if not NAME_PATTERN.fullmatch(job_name):
        raise ForeignMessage(f"header {JOB} is missing or not a job name")
    raw_max = h.get(MAX_ATTEMPTS, "")
    max_attempts = None if raw_max == "" else _int(h, MAX_ATTEMPTS)
    if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise ForeignMessage(f"header {MAX_ATTEMPTS} is out of range")
    before = _int(h, ATTEMPTS_BEFORE) if ATTEMPTS_BEFORE in h else 0
    if before > MAX_ATTEMPTS_LIMIT:
        raise ForeignMessage(f"header {ATTEMPTS_BEFORE} is out of range")
    snooze_count(h)  # a bad count is refused here, not when the job snoozes again
    try:
        payload = data.decode()
        orjson.loads(payload)
    except ValueError:
        raise ForeignMessage("the body is not JSON text") from None
    return ClaimedJob(
        id=seq,
        message_id=message_id,
        queue=queue,
        job_name=job_name,
        payload=payload,
        attempts=attempt + before,
        max_attempts=max_attempts,
        created_at=_int(h, CREATED_AT),
        available_at=_int(h, AVAILABLE_AT),
        trace_context=tracing.from_headers(h),
    )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter as ``queue failed`` lists it and ``queue retry`` re-drives it."""

    seq: int
    message_id: str
    queue: str
    job_name: str
    attempts: int
    max_attempts: int | None
    exception_class: str
    failed_at_ms: int
    body: dict[str, Any]


def dead_body(job: ClaimedJob, failure: Failure, partition: str | None = None) -> bytes:
    """The dead-letter record of ``job``. ``partition``, the ordered partition it was
    delivered from (a JetStream subject, a Redis stream), is given for a job with an
    ordering key, so ``queue retry`` puts it back in its key's partition (the key itself
    is not in the message); it is kept as ``subject``."""
    return orjson.dumps(
        {
            **({"subject": partition} if partition is not None else {}),
            "message_id": job.message_id,
            "queue": job.queue,
            "job_name": job.job_name,
            "payload": job.payload,
            "attempts": job.attempts,
            "max_attempts": job.max_attempts,
            "created_at_ms": job.created_at,
            "available_at_ms": job.available_at,
            "priority": job.priority,
            "exception_class": failure.exception_class[:200],
            "exception_message": failure.message,
            "exception_trace": failure.trace,
            "failed_at_ms": int(time.time() * 1000),
        }
    )


def foreign_body(
    queue: str, attempt: int, headers: dict[str, str] | None, data: bytes, why: str
) -> bytes:
    """A dead-letter record for a message that is not ours; a fresh id lets an operator
    ``forget`` it. The body is kept as text when it is UTF-8, else as its hex."""
    try:
        text, encoding = data.decode(), "utf-8"
    except UnicodeDecodeError:
        text, encoding = data.hex(), "hex"
    return orjson.dumps(
        {
            "message_id": str(uuid.uuid4()),
            "queue": queue,
            "job_name": "",
            "payload": text,
            "payload_encoding": encoding,
            "foreign_headers": headers or {},
            "attempts": attempt,
            "max_attempts": None,
            "created_at_ms": 0,
            "available_at_ms": 0,
            "exception_class": FOREIGN_CLASS,
            "exception_message": why,
            "exception_trace": "",
            "failed_at_ms": int(time.time() * 1000),
        }
    )


def decode_dead(seq: int, data: bytes) -> DeadLetter | None:
    """A dead-letter record, or None for anything else on a dead-letter subject."""
    try:
        body = orjson.loads(data)
        return DeadLetter(
            seq=seq,
            message_id=str(body["message_id"]),
            queue=str(body["queue"]),
            job_name=str(body["job_name"]),
            attempts=int(body["attempts"]),
            max_attempts=body.get("max_attempts"),
            exception_class=str(body["exception_class"]),
            failed_at_ms=int(body["failed_at_ms"]),
            body=body,
        )
    except (ValueError, KeyError, TypeError):
        return None
