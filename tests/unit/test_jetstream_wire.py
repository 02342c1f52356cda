"""The relay's own NATS frames: exactly the client protocol's HPUB, or nothing at all."""

from __future__ import annotations

from outbox.jetstream import wire

HEADERS = {"Nats-Msg-Id": "m-1", "Outbox-Job": "mail.send"}


def test_a_batch_is_one_hpub_frame_per_message_with_exact_lengths() -> None:
    data = wire.frames(
        [("outbox.jobs.a", b'{"x":1}', HEADERS), ("outbox.jobs.b", b"[]", {"K": "v"})],
        ["_INBOX.r.0-0", "_INBOX.r.0-1"],
        1024,
    )
    head = b"NATS/1.0\r\nNats-Msg-Id: m-1\r\nOutbox-Job: mail.send\r\n\r\n"
    first = b"HPUB outbox.jobs.a _INBOX.r.0-0 %d %d\r\n" % (len(head), len(head) + 7)
    second_head = b"NATS/1.0\r\nK: v\r\n\r\n"
    second = b"HPUB outbox.jobs.b _INBOX.r.0-1 %d %d\r\n" % (len(second_head), len(second_head) + 2)
    assert data == first + head + b'{"x":1}\r\n' + second + second_head + b"[]\r\n"


def test_a_header_value_with_a_line_break_is_not_framed_here() -> None:
    for value in ("a\r\nPUB evil 1\r\nx", "a\nb", "a\rb"):
        bad = {**HEADERS, "Nats-Msg-Id": value}
        assert wire.frames([("s", b"{}", HEADERS), ("s", b"{}", bad)], ["r.0", "r.1"], 1024) is None


def test_a_body_over_the_servers_max_payload_is_not_framed_here() -> None:
    assert wire.frames([("s", b"x" * 11, HEADERS)], ["r.0"], 10) is None
    assert wire.frames([("s", b"x" * 10, HEADERS)], ["r.0"], 10) is not None
