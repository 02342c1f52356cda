"""Queue control on JetStream: ``outbox queue pause/resume/cancel --broker``.

The state lives in one key-value bucket, ``OUTBOX_CONTROL`` (a JetStream stream, so it
works on nats-server 2.9): key ``paused.<queue>`` (a ``:`` in the queue name is written
``=``, which queue names never hold) exists while the queue is paused; key
``cancel.<message id>`` marks a job an operator cancelled. Every worker watches the
whole bucket; the server pushes each change to every watcher at once, so a pause or a
cancel reaches the whole fleet within a network round trip, not a poll. A worker reads
the bucket's whole state before its first fetch, so one started on a paused queue takes
nothing, and a cancelled job it is handed later is dead-lettered, never run.

A cancel mark stays until ``outbox queue retry`` re-drives that job (which deletes it):
a redelivery long after the cancel must still find it.

What pausing does to a worker's lane (``outbox.jetstream.lane``): it sends no pull
request, and starts nothing it already fetched (those wait, their leases renewed, and
start on resume); jobs already running run to their end, as on SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from outbox.log import get_logger

log = get_logger("outbox.worker")
BUCKET = "OUTBOX_CONTROL"
PAUSED = "paused."
CANCEL = "cancel."


def paused_key(queue: str) -> str:
    return PAUSED + queue.replace(":", "=")


def queue_of_key(key: str) -> str | None:
    if not key.startswith(PAUSED):
        return None
    return key[len(PAUSED) :].replace("=", ":")


async def bucket(js: JetStreamContext, name: str = BUCKET) -> KeyValue:
    """A bucket of ours (the control bucket unless ``name`` says another), created when
    missing by whichever command or worker needs it first."""
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=name, history=1)


async def pause(js: JetStreamContext, queue: str) -> bool:
    """Pause ``queue``; False when it was paused already (nothing changes)."""
    kv = await bucket(js)
    try:
        await kv.create(paused_key(queue), b"1")
    except Exception as exc:  # the key exists: already paused
        if await _is_paused(kv, queue):
            return False
        raise exc
    return True


async def resume(js: JetStreamContext, queue: str) -> bool:
    """Resume ``queue``; False when it was not paused."""
    kv = await bucket(js)
    if not await _is_paused(kv, queue):
        return False
    await kv.delete(paused_key(queue))
    return True


async def mark_cancelled(js: JetStreamContext, message_id: str) -> None:
    await (await bucket(js)).put(CANCEL + message_id, b"1")


async def unmark_cancelled(js: JetStreamContext, message_id: str) -> None:
    """Before a re-drive: the job runs again. A bucket or key never made is fine."""
    try:
        kv = await js.key_value(BUCKET)
    except BucketNotFoundError:
        return
    with contextlib.suppress(KeyNotFoundError):
        if await kv.get(CANCEL + message_id) is not None:
            await kv.delete(CANCEL + message_id)


async def _is_paused(kv: KeyValue, queue: str) -> bool:
    try:
        entry = await kv.get(paused_key(queue))
    except KeyNotFoundError:
        return False
    return entry is not None and entry.value is not None


class ControlWatch:
    """A worker's view of the paused queues and cancelled jobs, kept current by one
    watcher.

    ``start`` returns once the bucket's present state is read; ``on_change`` is then
    called on the loop after each change (the worker wakes its lanes), and
    ``on_cancel(message_id)`` after each new cancel mark (the worker flags the job).
    """

    def __init__(
        self,
        on_change: Callable[[], None],
        on_cancel: Callable[[str], None] = lambda message_id: None,
    ) -> None:
        self.paused: set[str] = set()
        self.cancelled: set[str] = set()  # message ids
        self._on_change, self._on_cancel = on_change, on_cancel
        self._task: asyncio.Task[None] | None = None

    async def start(self, js: JetStreamContext) -> None:
        kv = await bucket(js)
        watcher = await kv.watchall()
        while True:  # the present state, up to the marker (None) that ends it
            entry = await watcher.updates(timeout=10)  # type: ignore[no-untyped-call]
            if entry is None:
                break
            self._apply(entry)
        self._task = asyncio.create_task(self._follow(watcher))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        while True:
            try:
                entry = await watcher.updates(timeout=3600)  # type: ignore[no-untyped-call]
            except TimeoutError:
                continue
            except Exception as exc:  # the connection is reconnecting: the watcher resumes
                log.debug("worker.control_watch_failed", error=type(exc).__name__)
                await asyncio.sleep(1)
                continue
            if entry is not None:
                self._apply(entry, said=True)
                self._on_change()

    def _apply(self, entry: KeyValue.Entry, *, said: bool = False) -> None:
        gone = entry.operation in ("DEL", "PURGE") or not entry.value
        if entry.key.startswith(CANCEL):
            message_id = entry.key[len(CANCEL) :]
            if gone:
                self.cancelled.discard(message_id)
            elif message_id not in self.cancelled:
                self.cancelled.add(message_id)
                if said:
                    self._on_cancel(message_id)
            return
        queue = queue_of_key(entry.key)
        if queue is None:
            return
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self.paused.discard(queue)
            if said:
                log.info("worker.queue_resumed", queue=queue)
        else:
            self.paused.add(queue)
            if said:
                log.info("worker.queue_paused", queue=queue)
