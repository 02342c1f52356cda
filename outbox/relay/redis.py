"""The Redis Streams target: the relay hands intents off to Redis instead of the SQL queue.

One batch, in one database transaction::

    claim + lock the oldest pending rows ─► verify (bad rows: quarantined)
        ─► per queue, one script call on the queue's node (outbox.queue.redis.scripts):
           for each message, XADD it unless its seen marker is there, then set the marker
        ─► with ?wait=N: WAIT for N replicas on the same connection
        ─► delete the rows Redis took (their keys stay) ─► COMMIT

A row leaves the outbox only after Redis replied that its entry is on its stream (and,
with ``wait``, on that many replicas). A relay that dies between that reply and COMMIT
leaves its rows pending; whichever relay takes them next publishes them again under the
same message ids, and the script finds their seen markers and adds nothing, provided
that happens within the dedupe window: exactly once into the stream within the window,
at least once beyond it, as on JetStream (``outbox.relay.jetstream``). The relay refuses
a window shorter than its retry horizon.

A stream at its length limit (``--stream-max-msgs``) refuses the messages that do not
fit, and a Redis at ``maxmemory`` (with ``noeviction``) refuses the queue's call: those
rows stay pending, and the relay raises ``TargetRefused`` once the batch's accepted rows
are committed, so a watching relay backs off. Nothing is ever trimmed.

Ordering keys are kept as on JetStream: a batch holds a key's intents only when no older
one is pending elsewhere (``outbox.db.ordering.in_turn``); a script call adds them in id
order to the key's ordered partition stream, and when one is refused so are its key's
later ones (the stream stays full for the rest of the call). A key is kept per queue, as
on JetStream: a batch that puts a key in another queue than the last one logs
``relay.ordering_key_queues`` (``outbox.relay.key_queues``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import redis

from outbox.db.driver import Driver
from outbox.db.rows import HandoffResult, OutboxHandoff, StoredIntent
from outbox.errors import ConfigurationError
from outbox.jetstream import DEFAULT_DUPLICATE_WINDOW_S, MAX_IN_FLIGHT
from outbox.log import get_logger
from outbox.queue.redis import names
from outbox.queue.redis.connect import Connected, RedisUrl, broker_error, connect
from outbox.queue.redis.publish import Added, Full, Message, Publisher
from outbox.relay import brokered, message
from outbox.relay.key_queues import KeyQueues
from outbox.relay.message import refuse_workflows

log = get_logger("outbox.relay")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """How the relay publishes to Redis. Every field has a default.

    - ``dedupe_window`` (120 s): how long a seen marker lives; the handoff is exactly
      once within it.
    - ``max_len`` (0: none): the most entries one stream holds; a full stream refuses.
    - ``publish_timeout`` (10 s): the longest wait for one call's reply.
    - ``in_flight`` (2): batches in flight at once (1 on SQLite), as on JetStream.
    """

    dedupe_window: float = DEFAULT_DUPLICATE_WINDOW_S
    max_len: int = 0
    publish_timeout: float = 10.0
    in_flight: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.in_flight, bool) or not 1 <= self.in_flight <= MAX_IN_FLIGHT:
            raise ConfigurationError(f"in_flight must be between 1 and {MAX_IN_FLIGHT}")
        if isinstance(self.max_len, bool) or self.max_len < 0:
            raise ConfigurationError("max_len must be 0 (no limit) or more")

    def retry_horizon(self, url: RedisUrl, reconnect_max: float) -> float:
        """The longest a running relay takes to re-publish a batch it lost."""
        wait = url.wait_timeout if url.wait else 0.0
        return 2 * (self.publish_timeout + wait) + reconnect_max


class RedisTarget:
    """Publishes each batch to its queues' streams and keeps only acknowledged rows out.

    Safe for several batches in flight at once: each call takes a pooled connection."""

    name = "redis"

    def __init__(
        self, url: RedisUrl, settings: RedisSettings | None = None, *, reconnect_max: float = 30.0
    ) -> None:
        self.url = url
        self.settings = settings or RedisSettings()
        self.horizon = self.settings.retry_horizon(url, reconnect_max)
        if self.settings.dedupe_window < self.horizon:
            raise ConfigurationError(
                f"the Redis dedupe window is {self.settings.dedupe_window:g} s, shorter than "
                f"the relay's retry horizon of {self.horizon:g} s (publish timeout + wait + "
                "reconnect wait); lengthen the window or shorten the horizon"
            )
        self._conn: Connected | None = None
        self._publisher: Publisher | None = None
        self._lock = threading.Lock()
        self._key_queues = KeyQueues()  # a key in two queues is ordered in each only

    @property
    def in_flight(self) -> int:
        return self.settings.in_flight

    def open(self) -> None:
        """Connect now (the CLI calls it so an unreachable or wrong server fails at start)."""
        self._connected()

    def _connected(self) -> tuple[Connected, Publisher]:
        with self._lock:
            if self._conn is None or self._publisher is None:
                timeout = self.settings.publish_timeout + self.url.wait_timeout
                self._conn = connect(self.url, timeout=timeout)
                self._publisher = Publisher(self._conn.client)
                _log_durability(self._conn)
            return self._conn, self._publisher

    def handoff(self, driver: Driver, batch: OutboxHandoff) -> HandoffResult:
        return brokered.handoff(driver, batch, self._publish, self._drop, self._why)

    def _why(self, r: brokered.Refusal) -> str:
        if r.limit == "max_len":
            return f"is full (setting max_len {self.settings.max_len}, never trimmed)"
        return "did not accept them (Redis is at its maxmemory)"

    def _publish(self, intents: list[StoredIntent], refused: list[brokered.Refusal]) -> set[str]:
        if not intents:
            return set()
        refuse_workflows(intents)
        self._key_queues.check(intents)
        conn, publisher = self._connected()
        now_ms = int(time.time() * 1000)
        by_queue: dict[str, list[Message]] = {}
        for i in intents:
            by_queue.setdefault(str(i.queue), []).append(_message(i, now_ms))
        acked: set[str] = set()
        s = self.settings
        for queue, messages in by_queue.items():
            try:
                outcomes = publisher.publish(
                    conn.node(names.stream(queue)),
                    queue,
                    messages,
                    window_ms=int(s.dedupe_window * 1000),
                    max_len=s.max_len,
                    wait=self.url.wait,
                    wait_timeout=self.url.wait_timeout,
                    shown=self.url.shown,
                )
            except redis.ResponseError as exc:
                if not str(exc).startswith("OOM"):
                    raise broker_error(self.url, exc) from None
                brokered.note(refused, names.stream(queue), "maxmemory", len(messages))
                continue
            except redis.RedisError as exc:
                raise broker_error(self.url, exc) from None
            for m, outcome in zip(messages, outcomes, strict=True):
                if isinstance(outcome, Added):
                    acked.add(m.message_id)
                elif isinstance(outcome, Full):
                    brokered.note(refused, outcome.stream, "max_len")
        return acked

    def _drop(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._publisher = None

    def close(self) -> None:
        self._drop()


def _message(i: StoredIntent, now_ms: int) -> Message:
    """The entry of intent ``i``: its stream and its fields (``outbox.relay.message``)."""
    queue = str(i.queue)
    part = message.ordered_partition(i)
    if part is None:
        stream = names.stream(queue, message.band(i))
    else:
        stream = names.ordered_stream(queue, part)
    fields = message.headers(i, now_ms)
    fields[names.DATA_FIELD] = message.body(i)
    return Message(i.message_id, stream, fields)


def _log_durability(conn: Connected) -> None:
    """At each connect: how much an acknowledged handoff survives (docs/how-to/redis.md)."""
    url, d = conn.url, conn.durability
    safe = url.wait > 0 or (d.get("appendonly") == "yes" and d.get("appendfsync") == "always")
    evicts = d.get("maxmemory-policy", "").startswith("allkeys")
    fields = {
        "url": url.shown,
        "version": conn.version,
        "cluster": conn.cluster,
        "appendonly": d.get("appendonly", "unknown"),
        "appendfsync": d.get("appendfsync", "unknown"),
        "maxmemory_policy": d.get("maxmemory-policy", "unknown"),
        "wait": url.wait,
    }
    if evicts:  # an allkeys policy at maxmemory deletes streams of jobs no worker has read
        log.warning("relay.redis_evicts_keys", **fields)
    elif safe:
        log.info("relay.redis_durability", **fields)
    else:
        log.warning("relay.redis_not_fsynced", **fields)
