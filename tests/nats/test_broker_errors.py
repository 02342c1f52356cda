"""Broker errors keep the driver's cause, and are told apart by its code, not its text."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import NotFoundError

from outbox.errors import BrokerError
from outbox.jetstream import provision
from outbox.jetstream.connect import Broker, connect, parse_url
from tests.nats.support import queue_name


def test_an_unreachable_server_keeps_the_client_error_as_the_cause() -> None:
    url = parse_url("nats://127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(BrokerError) as err:
        asyncio.run(connect(url, timeout=0.5, reconnects=1))
    assert err.value.transient
    assert err.value.__cause__ is not None


def test_a_missing_stream_is_known_by_jetstreams_code(nats_url: str) -> None:
    settings = provision.StreamSettings()
    with Broker(parse_url(nats_url)) as broker, pytest.raises(BrokerError) as err:
        broker.call(provision.ensure(broker.js, queue_name(), settings, "require"))
    cause = err.value.__cause__
    assert isinstance(cause, NotFoundError) and cause.err_code == provision.STREAM_NOT_FOUND
    assert provision.stream_missing(err.value)


def test_the_words_does_not_exist_alone_do_not_make_a_stream_missing() -> None:
    assert not provision.stream_missing(BrokerError("stream x does not exist"))
    assert not provision.stream_missing(BrokerError("stream x: setting retention is limits"))
