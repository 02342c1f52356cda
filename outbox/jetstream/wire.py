"""NATS protocol frames for a batch of publishes, written in one go.

A message with headers is one ``HPUB`` frame (the NATS client protocol)::

    HPUB <subject> <reply> <header bytes> <total bytes>\\r\\n
    NATS/1.0\\r\\n<Name>: <value>\\r\\n...\\r\\n<payload>\\r\\n

Only the relay's batches come here, and their subjects, headers and bodies are the
relay's own (names verified by the outbox's rules). A value with a line break, or a body
over the server's ``max_payload``, is not framed here: the caller publishes such a batch
through nats-py, which cleans or refuses it as it always has.

The frames reach the socket through the client's own write queue (``_send_command``,
then its flusher), so they are ordered with everything else the client sends and ride
its reconnect handling. That queue is not public API; a client without it makes
``enqueue`` answer False and the caller falls back to ``publish``.
"""

from __future__ import annotations

from typing import Any

_HEAD = "NATS/1.0\r\n"


def frames(
    messages: list[tuple[str, bytes, dict[str, str]]], replies: list[str], max_payload: int
) -> bytes | None:
    """The ``HPUB`` frames of every message, or None when one is not safe to frame here."""
    out = bytearray()
    for (subject, body, headers), reply in zip(messages, replies, strict=True):
        head = _HEAD + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        lines = len(headers) + 2
        if head.count("\n") != lines or head.count("\r") != lines or len(body) > max_payload:
            return None
        raw = head.encode()
        out += f"HPUB {subject} {reply} {len(raw)} {len(raw) + len(body)}\r\n".encode()
        out += raw
        out += body
        out += b"\r\n"
    return bytes(out)


async def enqueue(nc: Any, data: bytes) -> bool:
    """Hand ``data`` to the client's write queue and wake its flusher; False when this
    client has no such queue (then nothing was sent)."""
    send = getattr(nc, "_send_command", None)
    flush = getattr(nc, "_flush_pending", None)
    if send is None or flush is None:
        return False
    await send(data)
    await flush()
    return True
