"""Broker errors keep the driver's cause, and are told apart by its code, not its text;
what a broker worker cannot apply is refused at start in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import BrokerError
from outbox.jetstream import provision
from outbox.jetstream.connect import Broker, connect, parse_url
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import cli_argv, finish, spawn
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


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--app", "tests.nats.app:limited"),
            "job t.limited has a global concurrency or rate limit",
        ),
        (
            ("--app", "tests.nats.app:registry", "--queue-concurrency", "q=2"),
            "--queue-concurrency is held by the SQL queue",
        ),
    ],
)
def test_the_cli_refuses_what_a_broker_worker_cannot_apply_in_one_line(
    args: tuple[str, ...], said: str, nats_url: str, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    with Database(url).connect() as c:
        migrate(c)
    code, _, err = finish(spawn(cli_argv(url, "worker", "q", "--broker", nats_url, *args)), 60)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1 and said in lines[0] and "Traceback" not in err, err
