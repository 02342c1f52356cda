"""Message ids: UUID version 7 (RFC 9562), time-ordered.

Time-ordered ids keep the unique index on ``message_id`` append-mostly, so inserts touch
the right edge of the B-tree instead of random pages. Python 3.11 has no ``uuid.uuid7``.

Within one process ids are strictly increasing (RFC 9562 method 1): the 12-bit
``rand_a`` field is a counter that starts at a random value below 2048 each millisecond
and counts up for ids made in the same millisecond; a clock that steps backwards keeps
the last timestamp. Across processes ids order by millisecond only; the 62 random bits of
``rand_b`` keep them unique.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_COUNTER_MAX = 0xFFF
# Random bits are read from os.urandom 512 ids at a time (a system call per id was a
# third of an id's cost) and kept as hex digits, 16 (64 bits) an id; a forked child drops
# what it inherited (``_forget_random``), so parent and child never hand out the same bits.
_RANDOM_BYTES = 8 * 512
_lock = threading.Lock()
_last_ms = -1
_last_counter = 0
_random = ""  # hex digits of os.urandom; those before _used are spent
_used = 0
_HEX = "0123456789abcdef"
_BYTE_HEX = [f"{b:02x}" for b in range(256)]
# A random hex digit as the first digit of rand_b's group: variant 0b10, two random bits.
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in _HEX}


def _forget_random() -> None:
    global _lock, _random, _used
    _random, _used = "", 0
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_random)


def _hex(digits: int) -> str:
    """``digits`` fresh random hex digits; the caller holds ``_lock``."""
    global _random, _used
    if _used + digits > len(_random):
        _random, _used = os.urandom(max(_RANDOM_BYTES, digits)).hex(), 0
    _used += digits
    return _random[_used - digits : _used]


def _texts(n: int, version: int) -> list[str]:
    """The next ``n`` ids in canonical text, under one lock and one clock read: 48-bit
    ms, the version digit and the 12-bit counter (never repeating or going back), then
    the variant 0b10 and 62 random bits.

    Assembled from strings (a millisecond's prefix formatted once, the counter and the
    random digits from tables and slices): formatting the 128-bit int in hex, as this
    did, was most of an id's cost in a batch (about 10k instructions; now about 5k).
    """
    global _last_ms, _last_counter
    now = time.time_ns() // 1_000_000
    out = []
    prefix_ms, prefix = -1, ""
    with _lock:
        rand = _hex(16 * n + 3)  # the last 3: a new millisecond's counter start
        for at in range(0, 16 * n, 16):
            if now > _last_ms:
                _last_ms, _last_counter = now, int(rand[-3:], 16) & 0x7FF
            elif _last_counter < _COUNTER_MAX:
                _last_counter += 1
            else:  # 4096 ids in one millisecond: borrow the next one
                _last_ms, _last_counter = _last_ms + 1, 0
            if _last_ms != prefix_ms:
                prefix_ms = _last_ms
                h = (prefix_ms & 0xFFFFFFFFFFFF).to_bytes(6, "big").hex()
                prefix = f"{h[:8]}-{h[8:]}-{_HEX[version]}"
            counter = _last_counter
            out.append(
                f"{prefix}{_HEX[counter >> 8]}{_BYTE_HEX[counter & 0xFF]}-"
                f"{_VARIANT[rand[at]]}{rand[at + 1 : at + 4]}-{rand[at + 4 : at + 16]}"
            )
    return out


def new_message_id(version: int = 0x7) -> str:
    """A new time-ordered UUID string (version ``version``, 7 unless a workflow node's
    8): 48-bit millisecond timestamp, 12-bit counter, 62 random bits."""
    return _texts(1, version)[0]


def new_message_ids(n: int) -> list[str]:
    """``n`` new ids, increasing, as ``new_message_id`` makes them one by one, under one
    lock and one clock read (``record_many`` and ``push_many``)."""
    return _texts(n, 0x7)


def is_message_id(text: str) -> bool:
    """True if ``text`` is a UUID in its canonical 36-character form."""
    try:
        return str(uuid.UUID(text)) == text.lower() and len(text) == 36
    except (ValueError, AttributeError, TypeError):
        return False


def new_node_id() -> str:
    """A workflow node's message id: laid out as ``new_message_id``'s (time-ordered), but
    version 8 (RFC 9562's custom version). The version digit alone tells the worker's
    acknowledgement that a job is a workflow node, so jobs outside workflows pay no
    query and no column for workflows."""
    return new_message_id(0x8)


def is_node_id(message_id: str) -> bool:
    """True for an id made by ``new_node_id`` (one character compared)."""
    return len(message_id) == 36 and message_id[14] == "8"
