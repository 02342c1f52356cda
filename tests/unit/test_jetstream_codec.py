"""The JetStream pieces that need no server: URLs (never echoing a secret), names, and
the message codec's verdict on messages that are not ours."""

from __future__ import annotations

import pytest

from outbox.errors import ConfigurationError
from outbox.jetstream import codec, names
from outbox.jetstream.connect import parse_url
from outbox.jetstream.publish import PublishRefused


def test_a_cluster_url_splits_into_servers_and_shows_no_credentials() -> None:
    url = parse_url("nats://ops:hunter2@n1:4222,n2,n3:5222")
    assert url.servers == ("nats://n1:4222", "nats://n2:4222", "nats://n3:5222")
    assert (url.user, url.password) == ("ops", "hunter2")
    assert url.shown == "n1:4222,n2:4222,n3:5222"


@pytest.mark.parametrize(
    "value",
    [
        "http://ops:hunter2@h:4222",
        "nats://ops:hunter2@h:port",
        "nats://ops:hunter2@",
        "nats://ops:hunter2@h:4222/x",
    ],
)
def test_a_bad_url_is_refused_without_repeating_it(value: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_url(value)
    assert "hunter2" not in str(err.value) and "ops" not in str(err.value)


def test_stream_names_contain_the_queue_and_dots_never_collide() -> None:
    assert names.stream("search") == "OUTBOX_search"
    assert names.dead_stream("search") == "OUTBOX_DEAD_search"
    assert names.stream("a.b") != names.stream("a_b")
    assert "." not in names.stream("a.b") and names.stream("a.b").startswith("OUTBOX_a_b")
    assert names.queue_of_subject(names.subject("a.b")) == "a.b"


def _headers(**over: str) -> dict[str, str]:
    h = codec.job_headers("0190d6a4-5c3a-7b8e-9f00-000000000001", "t.ok", None, 0, 1)
    h.update(over)
    return h


def test_our_message_decodes_into_a_job() -> None:
    job = codec.decode_job("q", 7, 2, _headers(), b'{"a":1}')
    assert (job.id, job.attempts, job.job_name, job.payload) == (7, 2, "t.ok", '{"a":1}')
    assert job.max_attempts is None


def test_a_message_without_the_snooze_headers_decodes_as_before() -> None:
    headers = _headers()
    assert codec.SNOOZES not in headers and codec.ATTEMPTS_BEFORE not in headers
    assert codec.decode_job("q", 7, 3, headers, b"{}").attempts == 3
    assert codec.snooze_count(headers) == 0


def test_a_snoozed_job_adds_the_attempts_spent_before_its_message() -> None:
    mid = "0190d6a4-5c3a-7b8e-9f00-000000000001"
    headers = codec.job_headers(
        mid, "t.ok", 4, 99, 1, msg_id=f"{mid}:snooze:7", snoozes=3, attempts_before=2
    )
    assert headers[codec.MSG_ID] == f"{mid}:snooze:7" and headers[codec.MESSAGE_ID] == mid
    job = codec.decode_job("q", 8, 1, headers, b"{}")
    assert (job.attempts, job.max_attempts, job.available_at) == (3, 4, 99)
    assert codec.snooze_count(headers) == 3


@pytest.mark.parametrize(
    "message_id",
    [
        "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B",
        "{0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b}",
        "urn:uuid:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "0190a1b2c3d47e5f8a9b0c1d2e3f4a5b",
    ],
)
def test_every_form_of_uuid_is_a_message_id_as_uuid_reads_it(message_id: str) -> None:
    job = codec.decode_job("q", 1, 1, _headers(**{codec.MESSAGE_ID: message_id}), b"{}")
    assert job.message_id == message_id


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (None, b"{}"),
        (_headers(**{codec.MESSAGE_ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5"}), b"{}"),
        (_headers(**{codec.MESSAGE_ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g"}), b"{}"),
        (_headers(**{codec.JOB: "bad name!"}), b"{}"),
        (_headers(**{codec.MESSAGE_ID: "not-a-uuid"}), b"{}"),
        (_headers(**{codec.MAX_ATTEMPTS: "0"}), b"{}"),
        (_headers(**{codec.CREATED_AT: "yesterday"}), b"{}"),
        (_headers(**{codec.SNOOZES: "-1"}), b"{}"),
        (_headers(**{codec.ATTEMPTS_BEFORE: "many"}), b"{}"),
        (_headers(**{codec.ATTEMPTS_BEFORE: "100000"}), b"{}"),
        (_headers(), b"\xff\xfe"),
        (_headers(), b"{not json"),
    ],
)
def test_anything_else_is_a_foreign_message(headers: dict[str, str] | None, body: bytes) -> None:
    with pytest.raises(codec.ForeignMessage):
        codec.decode_job("q", 1, 1, headers, body)


def test_a_refusal_names_the_limit_the_stream_is_at() -> None:
    assert PublishRefused(503, 10077, "maximum messages exceeded").full == "max_msgs"
    assert PublishRefused(503, 10077, "maximum bytes exceeded").full == "max_bytes"
    assert PublishRefused(503, 0, "no stream listens on the subject").full is None
