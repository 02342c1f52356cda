"""Message ids: UUID version 7 (RFC 9562), time-ordered.

Time-ordered ids keep the unique index on ``message_id`` append-mostly, so inserts touch
the right edge of the B-tree instead of random pages. Python 3.11 has no ``uuid.uuid7``.
"""

from __future__ import annotations

import os
import time
import uuid


def new_message_id() -> str:
    """A new UUIDv7 string: 48-bit millisecond timestamp, then 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))


def is_message_id(text: str) -> bool:
    """True if ``text`` is a UUID in its canonical 36-character form."""
    try:
        return str(uuid.UUID(text)) == text.lower() and len(text) == 36
    except (ValueError, AttributeError, TypeError):
        return False
