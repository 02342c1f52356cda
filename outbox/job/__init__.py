"""The job value type: validation, normalisation, key digest and fingerprint.

Everything here is pure (no database), so the same rules hold whichever connection
records a job, and the relay can re-check a stored row with the very same functions.

Fingerprint layout, chosen so SQL can recompute it (PostgreSQL ``sha256()``, MariaDB
``SHA2(..., 256)``, SQLite through a registered function)::

    version 2, priority 1-9:
    hex(sha256(utf8("v2" LF job_name LF queue LF max_attempts LF available_at LF priority
                    LF payload)))
    version 1, priority 0 (the default):
    hex(sha256(utf8("v1" LF job_name LF queue LF max_attempts LF available_at LF payload)))
    version 3, any job with an ordering key:
    hex(sha256(utf8("v3" LF job_name LF queue LF max_attempts LF available_at LF priority
                    LF ordering_key_digest LF payload)))

A job of the default priority keeps the version-1 layout: a key recorded before
priorities existed and replayed after the upgrade (or by code of the previous version
during a rolling deploy) matches, and every stored row still verifies. Any other
priority is sealed in version 2, so the same key with another priority is a conflict,
and a row whose priority was changed after recording fails verification either way.

- ``LF`` is one byte 0x0A; names cannot contain it (see ``NAME_PATTERN``).
- ``max_attempts``: decimal digits, or empty when ``None``.
- ``available_at``: the *given* availability as decimal integer milliseconds since the
  UNIX epoch, or empty when immediate (0). It is what the outbox row stores.
- ``priority``: one decimal digit, 1-9 (version 2 only).
- ``ordering_key_digest``: SHA-256 (hex) of the ordering key (version 3 only). A job
  without an ordering key keeps version 1 or 2, so every key recorded before ordering
  keys existed replays unchanged.
- ``payload``: the canonical JSON text (``canonical_json``), exactly as stored: with
  encryption on, its envelope (``outbox.job.sealing``), which makes the fingerprint a keyed
  digest of the job.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from outbox.errors import InvalidJob, InvalidKey
from outbox.job import sealing

MAX_PAYLOAD_BYTES = 65_535
MAX_DEPTH = 64
MAX_KEY_BYTES = 200
MAX_NAME_CHARS = 200
FINGERPRINT_VERSION = "v2"
# The layout of a job with an ordering key (see the module docstring).
FINGERPRINT_VERSION_ORDERED = "v3"
MAX_ORDERING_KEY_BYTES = 200
# A job waiting for its ordering key's turn has this added to its due time: past any
# real one (available_at ends at the year 9999, 2.5e14 ms), so the claim's unchanged
# ``available_at <= now`` never takes it; its turn subtracts it again (outbox.db.ordering).
BLOCKED_OFFSET_MS = 10**15
# The layout a priority-0 job keeps (see the module docstring).
FINGERPRINT_VERSION_DEFAULT_PRIORITY = "v1"
MIN_PRIORITY = 0
MAX_PRIORITY = 9
MAX_ATTEMPTS_LIMIT = 1_000
RESERVED_KEY_PREFIX = "schedule:"
NAME_PATTERN = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_NAME_CHARS}}}")
_KNOWN_NAMES_MAX = 4_096
_known_names: set[str] = set()
_JSON_SCALARS = (str, int, float, type(None))
_MAX_INT = 2**63 - 1
_MIN_INT = -(2**63)
_INF = math.inf
_sha256 = hashlib.sha256
_new_tuple = tuple.__new__
_SEALED = sealing.MARKER
_JSON_TYPES = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
# True only inside scheduler_keys(): the scheduler's own record() calls.
_SCHEDULER_KEYS: ContextVar[bool] = ContextVar("outbox_scheduler_keys", default=False)


@dataclass(frozen=True, slots=True)
class Job:
    """What to run: a registered handler ``name``, its JSON ``payload`` and its ``queue``.

    ``max_attempts=None`` defers to the registry's setting for the name when the job runs.
    ``priority`` runs from 0 (the default, most urgent) to 9: a worker claims the most
    urgent due job of a queue first, then the one due first.
    ``ordering_key`` (1-200 bytes of printable ASCII, or ``None``): jobs sharing one run
    one at a time, in the order their intents were committed (``outbox.db.ordering``).
    The payload is validated when the job is recorded or pushed, not here, so a ``Job``
    can be built before the caller knows whether it will be used.
    """

    name: str
    payload: Any = None
    queue: str = "default"
    max_attempts: int | None = None
    priority: int = 0
    ordering_key: str | None = None


def _no_typed_job(value: object) -> Job | None:
    return None


def _untyped(payload: object) -> Any:
    return payload


# outbox.job.typed sits above this module (it builds Jobs), so it plugs its conversions in
# when it loads, and `import outbox` always loads it: a typed value given where a Job is
# expected becomes its Job, and a typed payload is validated and dumped to JSON.
typed_job: Callable[[object], Job | None] = _no_typed_job
typed_payload: Callable[[object], Any] = _untyped


class NormalJob(NamedTuple):
    """A validated job: names checked, payload as canonical JSON text.

    A named tuple, not a frozen dataclass: one is built per intent on the recording
    path, and a tuple is built in a third of the time.
    """

    name: str
    queue: str
    payload_json: str
    max_attempts: int | None
    priority: int = 0
    # SHA-256 (hex) of the ordering key; None for a job without one.
    ordering_key: str | None = None


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a valid job or queue name, else raise ``InvalidJob``.

    A process uses a handful of names, so the ones seen valid are remembered (exact
    ``str`` only, at most ``_KNOWN_NAMES_MAX``): a set lookup instead of a regex match
    per intent.
    """
    if type(value) is str and value in _known_names:
        return value
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(
            f"{what} must be 1-200 characters of A-Z a-z 0-9 _ . : - (got {_describe(value)})"
        )
    if type(value) is str and len(_known_names) < _KNOWN_NAMES_MAX:
        _known_names.add(value)
    return value


def check_max_attempts(value: object) -> int | None:
    """Return a valid ``max_attempts`` (``None`` or 1..1000), else raise ``InvalidJob``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(f"max_attempts must be an int or None (got {type(value).__name__})")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidJob(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT} (got {value})")
    return value


def check_priority(value: object) -> int:
    """Return a valid priority (an int 0..9), else raise ``InvalidJob``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(f"priority must be an int from 0 to 9 (got {type(value).__name__})")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidJob(
            f"priority must be from {MIN_PRIORITY} (most urgent) to {MAX_PRIORITY} (got {value})"
        )
    return value


def normalise(job: Job) -> NormalJob:
    """Validate ``job`` and return it with its payload as canonical JSON text.

    The usual values (a remembered name, no ``max_attempts``, priority 0, no ordering
    key) skip the check functions' calls; anything else goes through them.
    """
    if not isinstance(job, Job):
        converted = typed_job(job)
        if converted is None:
            raise InvalidJob(f"expected an outbox.Job (got {type(job).__name__})")
        job = converted
    name, queue, attempts, priority = job.name, job.queue, job.max_attempts, job.priority
    if type(name) is not str or name not in _known_names:
        check_name(name, "job name")
    if type(queue) is not str or queue not in _known_names:
        check_name(queue, "queue name")
    payload = job.payload
    if type(payload) not in _JSON_TYPES:  # a typed value: validated and dumped (outbox.job.typed)
        payload = typed_payload(payload)
    payload_json = canonical_json(payload)  # the checks run in the order they always did
    # Sealed here, so every path that stores a payload stores the envelope (outbox.job.sealing);
    # with encryption off and a plain payload this is two reads, not a call.
    if sealing._ring is not None or payload_json.startswith(_SEALED):
        payload_json = sealing.seal_payload(payload_json, MAX_PAYLOAD_BYTES)
    if attempts is not None:
        check_max_attempts(attempts)
    if priority != 0 or type(priority) is not int:
        check_priority(priority)
    key = job.ordering_key
    ordering = None if key is None else ordering_digest(key)
    # NormalJob's own __new__ is a Python frame: 0.3 us a job.
    return _new_tuple(NormalJob, (name, queue, payload_json, attempts, priority, ordering))


def ordering_digest(value: object) -> str | None:
    """Validate an ordering key; return its SHA-256 digest (hex), all that is stored.

    A digest, not the text: it is fixed-width, compares byte for byte on every database
    (MariaDB's default collations would fold ``Order:1`` and ``order:1`` into one line),
    and keeps entity ids out of the queue's indexes, as the idempotency key does.
    ``None`` means no ordering. Raises ``InvalidJob`` naming the problem, never the key.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidJob(f"ordering_key must be a str or None (got {type(value).__name__})")
    problem = _key_problem(value)
    if problem is not None:
        raise InvalidJob(f"ordering_{problem}")
    return hashlib.sha256(value.encode("ascii")).hexdigest()


def canonical_json(payload: Any) -> str:
    """Encode ``payload`` as canonical JSON: object keys sorted, tuples as arrays.

    Only JSON values are accepted (dict with str keys, list, tuple, str, int, float, bool,
    None); everything orjson would quietly convert (datetimes, dataclasses, NaN as null)
    is refused, so what is stored is exactly what the caller meant.
    """
    _check_value(payload, depth=0)
    try:
        encoded = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        raise InvalidJob(f"payload cannot be encoded as JSON: {exc}") from exc
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise InvalidJob(
            f"payload is {len(encoded)} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return encoded.decode()


def _check_value(value: Any, depth: int) -> None:
    """Refuse what is not a JSON value (see ``canonical_json``).

    The common shapes (exact ``dict``/``list``/``tuple`` of exact ``str``, ``int``,
    ``bool``, ``None`` and finite ``float``) are checked inline, one call per container
    rather than one per value: it was most of ``record_many``'s per-item cost. Anything
    else, subclasses included, goes through ``_check_other``, which says what is wrong.
    """
    cls = type(value)
    if cls is dict or cls is list or cls is tuple:
        depth += 1
        if depth > MAX_DEPTH:
            raise InvalidJob(f"payload nests deeper than {MAX_DEPTH} arrays/objects")
        if cls is dict:
            for key, item in value.items():
                if type(key) is not str and not isinstance(key, str):
                    raise InvalidJob(
                        f"payload object keys must be strings (got {type(key).__name__})"
                    )
                kind = type(item)
                if kind is str or item is None or kind is bool:
                    continue
                if kind is int and _MIN_INT <= item <= _MAX_INT:
                    continue
                if kind is float and -_INF < item < _INF:
                    continue
                _check_value(item, depth)
        else:
            for item in value:
                kind = type(item)
                if kind is str or item is None or kind is bool:
                    continue
                if kind is int and _MIN_INT <= item <= _MAX_INT:
                    continue
                if kind is float and -_INF < item < _INF:
                    continue
                _check_value(item, depth)
        return
    _check_other(value, depth)


def _check_other(value: Any, depth: int) -> None:
    """``_check_value`` for a scalar, a value out of range, or a subclass of a JSON type."""
    if isinstance(value, (dict, list, tuple)):
        depth += 1
        if depth > MAX_DEPTH:
            raise InvalidJob(f"payload nests deeper than {MAX_DEPTH} arrays/objects")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidJob(
                        f"payload object keys must be strings (got {type(key).__name__})"
                    )
                _check_value(item, depth)
        else:
            for item in value:
                _check_value(item, depth)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJob("payload contains NaN or Infinity, which JSON cannot represent")
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if not _MIN_INT <= value <= _MAX_INT:
            raise InvalidJob("payload contains an integer outside the signed 64-bit range")
        return
    if not isinstance(value, _JSON_SCALARS):
        raise InvalidJob(f"payload contains a {type(value).__name__}, which is not a JSON value")


def key_digest(key: object) -> str:
    """Validate an idempotency key; return its SHA-256 digest (hex), all that is stored."""
    if not isinstance(key, str):
        raise InvalidKey(f"key must be a str (got {type(key).__name__})")
    problem = _key_problem(key)
    if problem is not None:
        raise InvalidKey(problem)
    if key.startswith(RESERVED_KEY_PREFIX) and not _SCHEDULER_KEYS.get():
        raise InvalidKey(f"the key prefix {RESERVED_KEY_PREFIX!r} is reserved for the scheduler")
    return _sha256(key.encode("ascii")).hexdigest()


@contextmanager
def scheduler_keys() -> Iterator[None]:
    """Within this block (this thread or task only), keys may use the reserved
    ``schedule:`` prefix: for ``outbox.schedule``, which records ticks through
    ``record()``. Not for applications."""
    token = _SCHEDULER_KEYS.set(True)
    try:
        yield
    finally:
        _SCHEDULER_KEYS.reset(token)


def _key_problem(key: str) -> str | None:
    """What is wrong with ``key``, said without repeating it (it may be long or odd)."""
    # Printable ASCII (0x20-0x7E) exactly: ASCII's non-printables are 0x00-0x1F and 0x7F.
    if 0 < len(key) <= MAX_KEY_BYTES and key.isascii() and key.isprintable():
        return None
    if not key:
        return "key is empty; it must be 1-200 bytes of printable ASCII (0x20-0x7E)"
    for index, char in enumerate(key):
        if not " " <= char <= "~":
            return (
                f"key has a character outside printable ASCII (0x20-0x7E) at index {index}"
                f" (U+{ord(char):04X})"
            )
    return f"key is {len(key)} bytes; the limit is {MAX_KEY_BYTES}"


# 2000-01-01T00:00:00Z. An availability before it is a delay given where a time was
# meant (available_at=60 for "in a minute"), which would run the job at once.
EARLIEST_AVAILABLE_AT = 946_684_800


def availability_ms(available_at: object) -> int | None:
    """The given availability as integer UNIX milliseconds, ``None`` meaning immediate.

    Accepts UNIX seconds (int or float) or an aware ``datetime``; 0 means now, and any
    other time must be in 2000 or later (``EARLIEST_AVAILABLE_AT``).
    """
    if isinstance(available_at, datetime):
        if available_at.tzinfo is None or available_at.utcoffset() is None:
            raise InvalidJob("available_at must be an aware datetime (it has no time zone)")
        seconds = available_at.timestamp()
    elif isinstance(available_at, (int, float)) and not isinstance(available_at, bool):
        seconds = float(available_at)
        if not math.isfinite(seconds):
            raise InvalidJob("available_at must be a finite number of UNIX seconds")
    else:
        raise InvalidJob(
            "available_at must be UNIX seconds (int/float) or an aware datetime"
            f" (got {type(available_at).__name__})"
        )
    if seconds < 0:
        raise InvalidJob("available_at must not be negative (0 means now)")
    if 0 < seconds < EARLIEST_AVAILABLE_AT:
        raise InvalidJob(
            f"available_at={available_at!r} is a UNIX time before the year 2000, not a delay:"
            f" for one, pass time.time() + {available_at!r} (0 means now)"
        )
    if seconds > 253_402_300_799:  # 9999-12-31T23:59:59Z
        raise InvalidJob("available_at is after the year 9999")
    ms = round(seconds * 1000)
    return ms or None


def fingerprint(job: NormalJob, available_at_ms: int | None) -> str:
    """SHA-256 (hex) over the layout in the module docstring (version 3 with an ordering
    key, else version 1 for priority 0 and version 2 for any other).

    One f-string per layout, not a tuple joined: it is computed once per intent."""
    name, queue, payload = job.name, job.queue, job.payload_json
    attempts = "" if job.max_attempts is None else str(job.max_attempts)
    at = "" if available_at_ms is None else str(available_at_ms)
    if job.ordering_key is not None:
        text = (
            f"{FINGERPRINT_VERSION_ORDERED}\n{name}\n{queue}\n{attempts}\n{at}\n"
            f"{job.priority!s}\n{job.ordering_key}\n{payload}"
        )
    elif job.priority:
        text = (
            f"{FINGERPRINT_VERSION}\n{name}\n{queue}\n{attempts}\n{at}\n"
            f"{job.priority!s}\n{payload}"
        )
    else:
        text = (
            f"{FINGERPRINT_VERSION_DEFAULT_PRIORITY}\n{name}\n{queue}\n{attempts}\n{at}\n{payload}"
        )
    return _sha256(text.encode()).hexdigest()


def _describe(value: object, show: bool = True) -> str:
    if not isinstance(value, str):
        return type(value).__name__
    if not value:
        return "an empty string"
    size = len(value.encode("utf-8", "surrogatepass"))
    if show and size <= 60 and value.isprintable():
        return repr(value)
    return f"a {size}-byte string"


def shown(value: object) -> str:
    """A wrong setting as an error message shows it: a number, bool or None by value
    (``0``, ``-1.0``, ``nan``; an int past 20 digits by its size), a short printable
    string quoted (a longer one by its size, so neither a payload nor a secret is
    echoed), anything else by its type."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**20 else f"an int of {value.bit_length()} bits"
    return _describe(value)
