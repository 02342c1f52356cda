"""Creating or checking a queue's two streams: ``--provisioning create|require``.

``create`` (default) adds a missing stream with our settings and checks an existing one;
``require`` only checks, so it never creates a stream and never changes the settings of
a running fleet's stream. An existing stream is never modified but in one way: ``create``
adds the subjects of ordering keys' partitions (``names.ordered_subjects``) to a queue
stream made before them, so a fleet upgrades in place; ``require`` reports that they are
missing (``Found.ordered``) and the relay refuses such a stream in one line. Any other
setting we cannot work with is an error naming the stream and the setting.

What must hold for a queue stream: work-queue retention (an acked or terminated message
leaves it), our subject among its subjects, discard ``new`` when it has a limit (discard
``old`` would drop jobs silently), and a duplicate window at least as long as the
relay's retry horizon (checked by the relay, which knows its horizon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from outbox.errors import BrokerError, ConfigurationError
from outbox.jetstream import DEFAULT_DUPLICATE_WINDOW_S, names

STREAM_NOT_FOUND = 10059  # JetStream's JSStreamNotFoundErr

Provisioning = Literal["create", "require"]


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """What ``create`` gives a new queue stream. Every field has a default.

    - ``duplicate_window`` (120 s, JetStream's own default): how long JetStream remembers
      a ``Nats-Msg-Id``; the handoff is exactly once within it.
    - ``max_msgs`` / ``max_bytes`` (-1: unlimited): the stream's limits; at a limit it
      refuses new messages (discard new) and the relay backs off.
    - ``replicas`` (1): copies of each stream in a cluster (3 for a three-node cluster).
    """

    duplicate_window: float = DEFAULT_DUPLICATE_WINDOW_S
    max_msgs: int = -1
    max_bytes: int = -1
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.duplicate_window <= 0:
            raise ConfigurationError("duplicate_window must be > 0 seconds")
        if not 1 <= self.replicas <= 5:
            raise ConfigurationError("replicas must be between 1 and 5")


@dataclass(frozen=True, slots=True)
class Found:
    """What a queue's stream allows: its duplicate window (seconds), and whether it has
    the subjects of every priority band (a stream made before priorities has band 0's
    only: every job goes there, in the order published), and whether it has the subjects
    of ordering keys' partitions."""

    window: float
    banded: bool
    ordered: bool = False


async def ensure(
    js: JetStreamContext, queue: str, settings: StreamSettings, mode: Provisioning
) -> Found:
    """Make sure ``queue``'s stream and dead-letter stream are usable; say what the
    queue stream allows."""
    work = StreamConfig(
        name=names.stream(queue),
        subjects=names.band_subjects(queue) + names.ordered_subjects(queue),
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        duplicate_window=settings.duplicate_window,
        max_msgs=settings.max_msgs,
        max_bytes=settings.max_bytes,
        num_replicas=settings.replicas,
    )
    dead = StreamConfig(
        name=names.dead_stream(queue),
        subjects=[names.dead_subject(queue)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        duplicate_window=settings.duplicate_window,
        num_replicas=settings.replicas,
    )
    found = await _existing_or_created(js, work, mode)
    await _existing_or_created(js, dead, mode)
    _check(found, work, dead=False)
    ordered = set(names.ordered_subjects(queue))
    if mode == "create" and not ordered <= set(found.subjects or []):
        found = await _add_subjects(js, found, ordered)
    subjects = set(found.subjects or [])
    banded = set(names.band_subjects(queue)) <= subjects
    return Found(float(found.duplicate_window or 0.0), banded, ordered <= subjects)


async def _add_subjects(js: JetStreamContext, found: StreamConfig, more: set[str]) -> StreamConfig:
    """The stream with ``more`` among its subjects (a stream made before ordering keys)."""
    have = list(found.subjects or [])
    found.subjects = have + sorted(more - set(have))
    try:
        return (await js.update_stream(found)).config
    except Exception as exc:
        raise BrokerError(
            f"stream {found.name}: could not add the subjects of ordering keys ({_why(exc)})"
        ) from exc


def missing_ordered(queue: str) -> str:
    """The one line for a stream without the ordered subjects, under ``require``."""
    return (
        f"stream {names.stream(queue)}: setting subjects lacks {names.ORDERED_SUBJECT}<0-"
        f"{names.ORDERED_PARTITIONS - 1}>.{queue}, which jobs with an ordering_key need (add "
        "them, or run the relay once with --provisioning create, which adds them)"
    )


async def _existing_or_created(
    js: JetStreamContext, wanted: StreamConfig, mode: Provisioning
) -> StreamConfig:
    assert wanted.name is not None
    try:
        return (await js.stream_info(wanted.name)).config
    except NotFoundError as exc:
        if mode == "require":
            raise BrokerError(
                f"stream {wanted.name} does not exist; --provisioning require never creates "
                "one (create it, or run with --provisioning create)"
            ) from exc
    try:
        return (await js.add_stream(wanted)).config
    except Exception as exc:
        raise BrokerError(f"stream {wanted.name} could not be created ({_why(exc)})") from exc


def stream_missing(exc: BrokerError) -> bool:
    """Did ``exc`` say that a stream does not exist (JetStream's error code, kept on the
    cause)?"""
    cause = exc.__cause__
    return isinstance(cause, NotFoundError) and cause.err_code == STREAM_NOT_FOUND


def _check(found: StreamConfig, wanted: StreamConfig, *, dead: bool) -> None:
    name = wanted.name
    if not dead and found.retention != RetentionPolicy.WORK_QUEUE:
        raise BrokerError(
            f"stream {name}: setting retention is {_value(found.retention)}, must be workqueue"
        )
    subject = (wanted.subjects or [""])[0]
    if subject not in (found.subjects or []):
        raise BrokerError(f"stream {name}: setting subjects does not include {subject}")
    limited = (found.max_msgs or -1) > 0 or (found.max_bytes or -1) > 0
    if limited and found.discard != DiscardPolicy.NEW:
        raise BrokerError(
            f"stream {name}: setting discard is {_value(found.discard)} with limits set, must "
            "be new (old would drop jobs)"
        )


def check_window(stream: str, window: float, horizon: float) -> None:
    """Refuse a duplicate window shorter than the relay's retry horizon: a re-publish
    after it would not be recognised as a duplicate."""
    if window < horizon:
        raise BrokerError(
            f"stream {stream}: setting duplicate_window is {window:g} s, shorter than the "
            f"relay's retry horizon of {horizon:g} s (publish timeout + reconnect wait); "
            "lengthen the window or shorten the horizon"
        )


def _value(v: object) -> str:
    return str(getattr(v, "value", v))


def _why(exc: Exception) -> str:
    description = getattr(exc, "description", None)
    return str(description) if description else type(exc).__name__
