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

Ordering keys are not kept on this target yet: in-flight batches and the shared pull
consumer would let one key's jobs run out of order. Rather than reorder them silently,
the relay refuses to start while any pending intent has one (``check_ordering``), and an
intent with one recorded later is never published: it stays pending and the batch ends
in ``TargetRefused`` (limit ``ordering_key``), loud in the logs and ``outbox status``;
relay such intents with the SQL queue target.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from outbox.db.driver import Driver
from outbox.db.rows import HandoffResult, OutboxHandoff, StoredIntent
from outbox.errors import BrokerError, ConfigurationError, TargetRefused
from outbox.ids import is_node_id
from outbox.jetstream import MAX_IN_FLIGHT, codec, names, provision
from outbox.jetstream.connect import Broker, BrokerUrl
from outbox.jetstream.publish import Acked, BatchPublisher, Outcome, PublishRefused
from outbox.log import get_logger
from outbox.relay.verify import reason_for

log = get_logger("outbox.relay")
# TargetRefused's limit for intents with an ordering key (module docstring).
ORDERING = "ordering_key"


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


@dataclass(slots=True)
class _Refusal:
    stream: str
    limit: str
    count: int = 0


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

    def check_ordering(self, driver: Driver) -> None:
        """Refuse to start while pending intents have an ordering key (module docstring)."""
        intents, _, _ = driver.ordering_counts()
        if intents:
            raise ConfigurationError(
                f"{intents} pending intents have an ordering_key, which the nats:// target"
                " does not keep in order yet; relay them with --target sql"
            )

    def prepare(self, queues: Iterable[str]) -> None:
        """Create or check these queues' streams now (a fleet's known queues at start)."""
        broker = self._connected()
        broker.call(self._ensure(broker, set(queues)))

    def handoff(self, driver: Driver, batch: OutboxHandoff) -> HandoffResult:
        broker = self._connected()
        refused: list[_Refusal] = []
        try:
            result = driver.outbox_handoff_published(
                batch, reason_for, lambda intents: self._publish(broker, intents, refused)
            )
        except BrokerError as exc:
            if exc.transient:
                self._drop()
            raise
        if refused:
            r = refused[0]
            why = (
                f"is full (setting {r.limit}, discard new)"
                if r.limit in ("max_msgs", "max_bytes")
                else "is not given intents with an ordering_key (relay them with --target sql)"
                if r.limit == ORDERING
                else f"did not accept them ({r.limit})"
            )
            raise TargetRefused(
                f"stream {r.stream} {why}: {r.count} intents stay pending",
                stream=r.stream,
                limit=r.limit,
                handed_off=result.handed_off,
            )
        return result

    def _publish(
        self, broker: Broker, intents: list[StoredIntent], refused: list[_Refusal]
    ) -> set[str]:
        ordered = [i for i in intents if i.ordering_key is not None]
        if ordered:  # never published: they stay pending (module docstring)
            refused.append(_Refusal(names.stream(str(ordered[0].queue)), ORDERING, len(ordered)))
            intents = [i for i in intents if i.ordering_key is None]
        if not intents:
            return set()
        refuse_workflows(intents)
        timeout = self.settings.publish_timeout
        try:
            broker.call(self._ensure(broker, {str(i.queue) for i in intents}), timeout * 2)
            acks = broker.call(self._publish_all(broker, intents), timeout + 1)
        except TimeoutError:
            raise BrokerError(
                f"NATS at {self.url.shown} did not acknowledge a batch within {timeout:g} s",
                transient=True,
            ) from None
        acked: set[str] = set()
        for intent, ack in zip(intents, acks, strict=True):
            if isinstance(ack, Acked):
                acked.add(intent.message_id)
            else:
                _note_failure(refused, str(intent.queue), ack)
        return acked

    async def _ensure(self, broker: Broker, queues: set[str]) -> None:
        for queue in sorted(queues - self._ready):
            s = self.settings
            found = await provision.ensure(broker.js, queue, s.streams, s.provisioning)
            provision.check_window(names.stream(queue), found.window, self.horizon)
            self._ready.add(queue)
            if found.banded:
                self._banded.add(queue)

    async def _publish_all(self, broker: Broker, intents: list[StoredIntent]) -> list[Outcome]:
        now_ms = int(time.time() * 1000)
        banded = self._banded
        messages = [
            (
                names.subject(str(i.queue), int(i.priority or 0) if i.queue in banded else 0),
                str(i.payload).encode(),
                codec.job_headers(
                    i.message_id,
                    str(i.job_name),
                    i.max_attempts,
                    int(i.available_at or 0),
                    now_ms,
                    trace_context=i.trace_context,
                ),
            )
            for i in intents
        ]
        if self._publisher is None:
            self._publisher = BatchPublisher(broker.nc)
        return await self._publisher.publish(messages, self.settings.publish_timeout)

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

    def close(self) -> None:
        self._drop()


def refuse_workflows(intents: list[StoredIntent]) -> None:
    """A workflow's node is never published: its dependents become due in its
    acknowledgement's database transaction, which a JetStream acknowledgement is not
    (``outbox.workflows``). The batch rolls back, every row stays pending, and the relay
    stops with this one line; a relay with the SQL queue target hands them off."""
    node = next((i for i in intents if is_node_id(i.message_id)), None)
    if node is not None:
        raise ConfigurationError(
            f"intent {node.message_id} is a workflow node: workflows run on the SQL queue "
            "only (their nodes become due in a database transaction that a JetStream ack "
            "is not); relay it without --target nats://"
        )


def _note_failure(refused: list[_Refusal], queue: str, outcome: PublishRefused) -> None:
    """The row stays pending; remember why (the batch's first refusal), for ``TargetRefused``."""
    if not refused:
        limit = outcome.full or f"error {outcome.err_code or outcome.code}"
        refused.append(_Refusal(names.stream(queue), limit))
    refused[0].count += 1
