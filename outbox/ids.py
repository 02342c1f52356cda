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
import struct
import threading
import time
import uuid

_COUNTER_MAX = 0xFFF
_RAND_B_MASK = (1 << 62) - 1
# Random bits are read from os.urandom 512 ids at a time (a system call per id was a
# third of an id's cost) and handed out as 64-bit ints; a forked child drops what it
# inherited (``_forget_random``), so parent and child never hand out the same bits.
_RANDOM_WORDS = 512
_lock = threading.Lock()
_last_ms = -1
_last_counter = 0
_random: list[int] = []


def _forget_random() -> None:
    global _lock
    _random.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_random)


def _word() -> int:
    """64 fresh random bits; the caller holds ``_lock``."""
    if not _random:
        _random.extend(struct.unpack(f">{_RANDOM_WORDS}Q", os.urandom(8 * _RANDOM_WORDS)))
    return _random.pop()


def _next_stamp() -> tuple[int, int, int]:
    """The (millisecond, counter, rand_b) of the next id: the first two never repeating
    or going back, the last 62 random bits."""
    global _last_ms, _last_counter
    now = time.time_ns() // 1_000_000
    with _lock:
        if now > _last_ms:
            _last_ms, _last_counter = now, _word() & 0x7FF
        elif _last_counter < _COUNTER_MAX:
            _last_counter += 1
        else:  # 4096 ids in one millisecond: borrow the next one
            _last_ms, _last_counter = _last_ms + 1, 0
        return _last_ms, _last_counter, _word() & _RAND_B_MASK


def new_message_id(version: int = 0x7) -> str:
    """A new time-ordered UUID string (version ``version``, 7 unless a workflow node's
    8): 48-bit millisecond timestamp, 12-bit counter, 62 random bits."""
    ms, counter, rand_b = _next_stamp()
    value = (ms & 0xFFFFFFFFFFFF) << 80 | version << 76 | counter << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"  # uuid.UUID(int=...) would check and convert again: 3x slower
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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
