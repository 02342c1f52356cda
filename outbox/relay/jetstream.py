"""The JetStream target: the relay hands intents off to NATS instead of the SQL queue.

One batch, in one database transaction::

    claim + lock the oldest pending rows ─► verify (bad rows: quarantined)
        ─► publish every valid row at once (Nats-Msg-Id = message id)
        ─► await all the PubAcks together
        ─► delete the acknowledged rows (their keys stay) ─► COMMIT

A row leaves the outbox only after its PubAck. A relay that dies between the PubAck and
COMMIT leaves its rows pending; whichever relay takes them next publishes them again
under the same ``Nats-Msg-Id`` and JetStream drops the copy as a duplicate, provided
that happens within the stream's duplicate window. Hence the guarantee: exactly once
into the stream within the duplicate window, at least once beyond it.

Within one running relay the longest gap between a publish and its re-publish is the
*retry horizon*: the publish timeout twice (the lost batch and the next) plus the
longest backoff between failed batches. The relay refuses a stream whose duplicate
window is shorter.

A stream at its limits (discard new) refuses the message: the row stays pending and
the relay raises ``TargetRefused`` once the batch's accepted rows are committed, so a
watching relay backs off (``Relay.watch``) and ``outbox status --target`` shows it.

Ordering keys are kept (``docs/how-to/ordering.md``). A batch publishes a keyed intent
only when no older pending intent of its key is outside the batch
(``outbox.db.ordering.in_turn``): one in another lane's batch, or one a refused publish
left behind, is still pending, so a key is never in two batches in flight. Within a
batch a key's intents go out one after another, each after the PubAck of the one before
(``_publish_all``'s rounds), while keyless rows and other keys go at once in the first
round; when one of a key's messages is refused, it and the key's later ones stay
pending. A keyed job goes on its key's ordered partition subject
(``names.ordered_subject``), whose consumer the worker reads one message at a time.
A stream without those subjects (made before them, under ``--provisioning require``)
is refused in one line when a keyed intent meets it; nothing is published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from outbox.db.driver import Driver
from outbox.db.rows import HandoffResult, OutboxHandoff, StoredIntent
from outbox.errors import BrokerError, ConfigurationError
from outbox.jetstream import MAX_IN_FLIGHT, names, provision
from outbox.jetstream.connect import Broker, BrokerUrl
from outbox.jetstream.publish import Acked, BatchPublisher, Outcome, PublishRefused
from outbox.log import get_logger
from outbox.relay import brokered, message
from outbox.relay.key_queues import KeyQueues
from outbox.relay.message import refuse_workflows

log = get_logger("outbox.relay")


@dataclass(frozen=True, slots=True)
class JetStreamSettings:
    """How the relay publishes. Every field has a default.

    - ``streams``: what ``create`` gives new streams (``provision.StreamSettings``).
    - ``provisioning`` ("create"): ``require`` never creates or changes a stream.
    - ``publish_timeout`` (10 s): the longest wait for one batch's PubAcks.
    - ``in_flight`` (2): batches in flight at once, each in its own transaction on its
      own connection (``outbox.relay.inflight``; 1 on SQLite): one is claimed and published
      while another waits for its PubAcks. 1 publishes batch after batch, in id order.
    """

    streams: provision.StreamSettings = field(default_factory=provision.StreamSettings)
    provisioning: provision.Provisioning = "create"
    publish_timeout: float = 10.0
    in_flight: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.in_flight, bool) or not 1 <= self.in_flight <= MAX_IN_FLIGHT:
            raise ConfigurationError(f"in_flight must be between 1 and {MAX_IN_FLIGHT}")

    def retry_horizon(self, reconnect_max: float) -> float:
        """The longest a running relay takes to re-publish a batch it lost."""
        return 2 * self.publish_timeout + reconnect_max


class JetStreamTarget:
    """Publishes each batch to its queues' streams and keeps only acknowledged rows out.

    Safe to call for several batches in flight at once: they share one connection to NATS,
    whose event loop does all the publishing."""

    name = "nats"

    def __init__(
        self,
        url: BrokerUrl,
        settings: JetStreamSettings | None = None,
        *,
        reconnect_max: float = 30.0,
    ) -> None:
        self.url = url
        self.settings = settings or JetStreamSettings()
        self.horizon = self.settings.retry_horizon(reconnect_max)
        provision.check_window(
            "(new streams)", self.settings.streams.duplicate_window, self.horizon
        )
        self._broker: Broker | None = None
        self._publisher: BatchPublisher | None = None
        self._ready: set[str] = set()
        self._banded: set[str] = set()  # queues whose stream has every priority band
        self._ordered: set[str] = set()  # queues whose stream has the ordered partitions
        self._key_queues = KeyQueues()  # a key in two queues is ordered in each only
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        return self.settings.in_flight

    def open(self) -> None:
        """Connect now (the CLI calls it so an unreachable broker fails at start)."""
        self._connected()

    def _connected(self) -> Broker:
        with self._lock:
            if self._broker is not None and self._broker.nc.is_closed:
                self._drop_locked()
            if self._broker is None:
                self._broker = Broker(self.url)
            return self._broker

    def prepare(self, queues: Iterable[str]) -> None:
        """Create or check these queues' streams now (a fleet's known queues at start)."""
        broker = self._connected()
        broker.call(self._ensure(broker, set(queues)))

    def handoff(self, driver: Driver, batch: OutboxHandoff) -> HandoffResult:
        broker = self._connected()
        return brokered.handoff(
            driver, batch, lambda intents, refused: self._publish(broker, intents, refused),
            self._drop, _why,
        )  # fmt: skip

    def _publish(
        self, broker: Broker, intents: list[StoredIntent], refused: list[brokered.Refusal]
    ) -> set[str]:
        if not intents:
            return set()
        refuse_workflows(intents)
        self._key_queues.check(intents)
        timeout = self.settings.publish_timeout
        try:
            broker.call(self._ensure(broker, {str(i.queue) for i in intents}), timeout * 2)
            self._refuse_unordered(intents)
            rounds = _rounds(intents)
            acks = broker.call(self._publish_all(broker, rounds), timeout * len(rounds) + 1)
        except TimeoutError:
            raise BrokerError(
                f"NATS at {self.url.shown} did not acknowledge a batch within {timeout:g} s",
                transient=True,
            ) from None
        acked: set[str] = set()
        for intent, ack in acks:
            if isinstance(ack, Acked):
                acked.add(intent.message_id)
            else:
                _note_failure(refused, str(intent.queue), ack)
        left = len(intents) - len(acks)  # later intents of a key whose publish failed
        if left and refused:
            refused[0].count += left
        return acked

    def _refuse_unordered(self, intents: list[StoredIntent]) -> None:
        """A keyed intent for a stream without the ordered subjects stops the relay in
        one line, before anything of the batch is published."""
        for i in intents:
            if i.ordering_key is not None and str(i.queue) not in self._ordered:
                raise ConfigurationError(provision.missing_ordered(str(i.queue)))

    async def _ensure(self, broker: Broker, queues: set[str]) -> None:
        for queue in sorted(queues - self._ready):
            s = self.settings
            found = await provision.ensure(broker.js, queue, s.streams, s.provisioning)
            provision.check_window(names.stream(queue), found.window, self.horizon)
            self._ready.add(queue)
            if found.banded:
                self._banded.add(queue)
            if found.ordered:
                self._ordered.add(queue)

    async def _publish_all(
        self, broker: Broker, rounds: list[list[StoredIntent]]
    ) -> list[tuple[StoredIntent, Outcome]]:
        """Publish the rounds one after another, each once the one before is acknowledged;
        a key whose message was refused publishes nothing after it (its later intents are
        left out of the outcomes: they stay pending)."""
        if self._publisher is None:
            self._publisher = BatchPublisher(broker.nc)
        out: list[tuple[StoredIntent, Outcome]] = []
        stopped: set[str] = set()  # keys with a refused message
        for intents in rounds:
            intents = [
                i for i in intents if i.ordering_key is None or i.ordering_key not in stopped
            ]
            if not intents:
                continue
            now_ms = int(time.time() * 1000)
            messages = [self._message(i, now_ms) for i in intents]
            acks = await self._publisher.publish(messages, self.settings.publish_timeout)
            for intent, ack in zip(intents, acks, strict=True):
                out.append((intent, ack))
                if intent.ordering_key is not None and not isinstance(ack, Acked):
                    stopped.add(intent.ordering_key)
        return out

    def _message(self, i: StoredIntent, now_ms: int) -> tuple[str, bytes, dict[str, str]]:
        queue = str(i.queue)
        part = message.ordered_partition(i)
        if part is not None:
            subject = names.ordered_subject(queue, part)
        else:
            subject = names.subject(queue, message.band(i) if queue in self._banded else 0)
        return subject, message.body(i).encode(), message.headers(i, now_ms)

    def _drop(self) -> None:
        with self._lock:
            self._drop_locked()

    def _drop_locked(self) -> None:
        if self._broker is not None:
            self._broker.close()
        self._broker = None
        self._publisher = None
        self._ready.clear()
        self._banded.clear()
        self._ordered.clear()

    def close(self) -> None:
        self._drop()


def _rounds(intents: list[StoredIntent]) -> list[list[StoredIntent]]:
    """The batch as publishing rounds: round n holds every key's n-th intent (id order),
    and the first round every keyless one too, so keyless rows go out at once."""
    rounds: list[list[StoredIntent]] = [[]]
    seen: dict[str, int] = {}
    for i in intents:
        if i.ordering_key is None:
            rounds[0].append(i)
            continue
        n = seen.get(i.ordering_key, 0)
        seen[i.ordering_key] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(i)
    return rounds


def _note_failure(refused: list[brokered.Refusal], queue: str, outcome: PublishRefused) -> None:
    """The row stays pending; remember why (the batch's first refusal), for ``TargetRefused``."""
    limit = outcome.full or f"error {outcome.err_code or outcome.code}"
    brokered.note(refused, names.stream(queue), limit)


def _why(r: brokered.Refusal) -> str:
    if r.limit in ("max_msgs", "max_bytes"):
        return f"is full (setting {r.limit}, discard new)"
    return f"did not accept them ({r.limit})"
