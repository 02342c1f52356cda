"""Queue administration on JetStream: what ``outbox queue stats/failed/retry/forget
--broker`` and ``outbox status --target`` do.

Counts come from the streams and the workers' consumer: ``ready`` is not yet delivered,
``reserved`` is delivered and not yet acknowledged (running, prefetched, or NAKed with a
backoff delay), ``dead`` is the dead-letter stream's count. Dead letters are read one by
one (JetStream has no index on our message id), which suits an operator's command, not
a hot path.

``retry`` re-drives a dead letter onto its queue under a *new* ``Nats-Msg-Id``
(``<message id>:redrive:<dead-letter sequence>``): under the old one JetStream would drop
it as a duplicate within the window. The job keeps its message id (``ctx.message_id``)
and starts again at attempt 1. The dead letter is deleted only after the PubAck; a crash
in between re-drives it again under the same new id, which JetStream absorbs.

``jobs`` lists the messages in the queue streams (read by sequence, never consumed),
without payloads: ``ready``/``delayed`` were never delivered, ``reserved`` were
delivered and not acknowledged (running, prefetched, or waiting for their retry).
``cancel`` marks the job in the control bucket first (``outbox.jetstream.control``),
then takes a never-delivered message out of its stream and writes its dead letter
(class ``cancelled``) itself; a delivered one is left to the worker holding it, which
sees the mark. A worker racing the delete sees the mark too and writes the same dead
letter under the same ``Nats-Msg-Id``, so JetStream keeps one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError

from outbox.db.driver import CANCELLED_FAILURE
from outbox.db.rows import ClaimedJob
from outbox.errors import BrokerError, MessageNotFound
from outbox.jetstream import codec, control, names
from outbox.jetstream.connect import Broker

# A byte-limited stream counts as refusing when less than one largest job still fits.
_ROOM_BYTES = 65_535 + 1024


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    ready: int
    reserved: int
    dead: int


@dataclass(frozen=True, slots=True)
class StreamState:
    """One queue stream as ``status --target`` shows it; ``refusing`` names the limit it
    is at (``max_msgs``/``max_bytes``), else None."""

    stream: str
    queue: str
    messages: int
    max_msgs: int
    bytes: int
    max_bytes: int
    refusing: str | None


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """One job message in a queue stream, as ``queue jobs --broker`` shows it."""

    job: ClaimedJob  # its payload is never shown
    state: Literal["ready", "delayed", "reserved"]


async def _queue_streams(broker: Broker) -> list[tuple[str, StreamInfo]]:
    found = []
    for info in await broker.js.streams_info():
        name = info.config.name or ""
        if name.startswith(names.STREAM_PREFIX) and not name.startswith(names.DEAD_PREFIX):
            queue = names.queue_of_subject((info.config.subjects or [""])[0])
            if queue is not None:
                found.append((queue, info))
    return sorted(found, key=lambda pair: pair[0])


def stats(broker: Broker) -> list[QueueStats]:
    async def read() -> list[QueueStats]:
        out = []
        for queue, info in await _queue_streams(broker):
            ready, reserved = info.state.messages, 0
            consumers = await _consumers(broker, queue)
            if consumers:
                ready = sum(c.num_pending for c in consumers)
                reserved = sum(c.num_ack_pending for c in consumers)
            out.append(QueueStats(queue, ready, reserved, await _dead_count(broker, queue)))
        return out

    return broker.call(read())


async def _dead_count(broker: Broker, queue: str) -> int:
    try:
        return (await broker.js.stream_info(names.dead_stream(queue))).state.messages
    except NotFoundError:
        return 0


def streams(broker: Broker) -> list[StreamState]:
    """Every queue stream with its limits, and whether it refuses new messages now."""

    async def read() -> list[StreamState]:
        out = []
        for queue, info in await _queue_streams(broker):
            c, s = info.config, info.state
            max_msgs, max_bytes = c.max_msgs or -1, c.max_bytes or -1
            refusing = None
            if max_msgs > 0 and s.messages >= max_msgs:
                refusing = "max_msgs"
            elif max_bytes > 0 and s.bytes + _ROOM_BYTES > max_bytes:
                refusing = "max_bytes"
            out.append(
                StreamState(c.name or "", queue, s.messages, max_msgs, s.bytes, max_bytes, refusing)
            )
        return out

    return broker.call(read())


async def _dead_letters(broker: Broker, limit: int | None) -> list[codec.DeadLetter]:
    out: list[codec.DeadLetter] = []
    for queue, _ in await _queue_streams(broker):
        try:
            state = (await broker.js.stream_info(names.dead_stream(queue))).state
        except NotFoundError:
            continue
        for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
            if limit is not None and len(out) >= limit:
                return out
            try:
                raw = await broker.js.get_msg(names.dead_stream(queue), seq)
            except NotFoundError:
                continue
            dead = codec.decode_dead(seq, raw.data or b"")
            if dead is not None:
                out.append(dead)
    return out


def failed(broker: Broker, limit: int | None) -> list[codec.DeadLetter]:
    """Up to ``limit`` dead letters, queue by queue, oldest first."""
    return broker.call(_dead_letters(broker, limit))


def _matching(broker: Broker, message_id: str | None) -> list[codec.DeadLetter]:
    letters = broker.call(_dead_letters(broker, None))
    chosen = [d for d in letters if message_id is None or d.message_id == message_id]
    if message_id is not None and not chosen:
        raise MessageNotFound(f"no dead letter on NATS has message id {message_id}")
    return chosen


def retry(broker: Broker, message_id: str | None) -> int:
    """Re-drive one dead letter (or all, ``None``) onto its queue; return how many."""
    letters = _matching(broker, message_id)
    foreign = [d for d in letters if not d.job_name]
    if message_id is not None and foreign:
        raise BrokerError(
            f"dead letter {message_id} is a message outbox did not publish; it cannot run "
            "(`outbox queue forget` it)"
        )
    jobs = [d for d in letters if d.job_name]
    for d in jobs:
        broker.call(_redrive(broker, d))
    return len(jobs)


async def _banded(broker: Broker, queue: str) -> bool:
    info = await broker.js.stream_info(names.stream(queue))
    return set(names.band_subjects(queue)) <= set(info.config.subjects or [])


async def _consumers(broker: Broker, queue: str) -> list[Any]:
    """The consumer of each band the queue's workers made (band 0 first), then those of
    the ordered partitions (jobs with an ordering key)."""
    out = []
    wanted = [names.consumer(b) for b in names.BANDS]
    wanted += [names.ordered_consumer(p) for p in range(names.ORDERED_PARTITIONS)]
    for name in wanted:
        try:
            out.append(await broker.js.consumer_info(names.stream(queue), name))
        except NotFoundError:
            continue  # no worker made it yet (or a stream made before priorities)
    return out


async def _jobs(
    broker: Broker, queue: str | None, limit: int | None, message_id: str | None = None
) -> list[WaitingJob]:
    out: list[WaitingJob] = []
    now_ms = int(time.time() * 1000)
    for q, info in await _queue_streams(broker):
        if queue is not None and q != queue:
            continue
        delivered = {  # each consumer reads one subject: a band's or a partition's
            c.config.filter_subject or "": c.delivered.stream_seq or 0
            for c in await _consumers(broker, q)
        }
        state = info.state
        for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
            if limit is not None and len(out) >= limit:
                return out
            try:
                raw = await broker.js.get_msg(names.stream(q), seq)
                job = codec.decode_job(q, seq, 0, raw.headers, raw.data or b"")
            except (NotFoundError, codec.ForeignMessage):
                continue
            if message_id is not None and job.message_id != message_id:
                continue
            job.priority = names.band_of_subject(raw.subject or "")
            if seq <= delivered.get(raw.subject or "", 0):
                out.append(WaitingJob(job, "reserved"))
            else:
                out.append(WaitingJob(job, "ready" if job.available_at <= now_ms else "delayed"))
    return out


def jobs(broker: Broker, queue: str | None, limit: int) -> list[WaitingJob]:
    """Up to ``limit`` jobs in the queue streams, queue by queue, oldest first."""
    return broker.call(_jobs(broker, queue, limit))


def cancel(broker: Broker, message_id: str) -> Literal["dead", "flagged"]:
    """Cancel the job ``message_id``: "dead" when it had not been delivered (its dead
    letter is written now), "flagged" when a worker has it (that worker records it)."""
    found = broker.call(_jobs(broker, None, None, message_id))
    if not found:
        raise MessageNotFound(f"no job with message id {message_id} in a queue on NATS")
    broker.call(control.mark_cancelled(broker.js, message_id))
    how: Literal["dead", "flagged"] = "flagged"
    for w in found:
        if w.state != "reserved":
            broker.call(_bury_cancelled(broker, w.job))
            how = "dead"
    return how


async def _bury_cancelled(broker: Broker, job: ClaimedJob) -> None:
    """Take the message out, then write its dead letter under the id a worker would use
    (``outbox.jetstream.lane``); a worker that fetched it first wrote the same one."""
    queue = job.queue
    try:
        await broker.js.delete_msg(names.stream(queue), job.id)
    except NotFoundError:
        return  # a worker settled it first, and saw the mark
    dedupe = f"dead:{names.stream(queue)}:{job.id}"
    await broker.js.publish(
        names.dead_subject(queue),
        codec.dead_body(job, CANCELLED_FAILURE),
        headers={codec.MSG_ID: dedupe},
        stream=names.dead_stream(queue),
    )


async def _redrive(broker: Broker, d: codec.DeadLetter) -> None:
    body = d.body
    headers = codec.job_headers(
        d.message_id,
        d.job_name,
        d.max_attempts,
        0,
        int(body.get("created_at_ms") or 0),
        msg_id=f"{d.message_id}:redrive:{d.seq}",
    )
    payload = str(body.get("payload", "null")).encode()
    await control.unmark_cancelled(broker.js, d.message_id)  # it runs again
    subject = body.get("subject")
    if not (isinstance(subject, str) and subject in names.ordered_subjects(d.queue)):
        priority = body.get("priority")  # a keyed job's partition wins (codec.dead_body)
        band = priority if isinstance(priority, int) and priority in names.BANDS else 0
        if band and not await _banded(broker, d.queue):
            band = 0  # a stream made before priorities: its one subject
        subject = names.subject(d.queue, band)
    await broker.js.publish(subject, payload, headers=headers, stream=names.stream(d.queue))
    await broker.js.delete_msg(names.dead_stream(d.queue), d.seq)


def forget(broker: Broker, message_id: str) -> int:
    """Delete the dead letters with ``message_id``; return how many."""
    letters = _matching(broker, message_id)
    for d in letters:
        broker.call(broker.js.delete_msg(names.dead_stream(d.queue), d.seq))
    return len(letters)
