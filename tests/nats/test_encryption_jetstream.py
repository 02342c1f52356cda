"""Encryption at rest on the JetStream hand-off: the broker holds ciphertext (the stream
is read message by message), the JetStream worker opens it for the handler, a dead
letter's message is sealed, and a job whose key is missing is parked as a dead letter
of class ``MissingKey`` that runs once the key is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError

from outbox.jetstream import admin, names
from outbox.jetstream.connect import Broker, parse_url
from outbox.job import sealing
from tests.nats import support
from tests.nats import test_worker_jetstream as jetstream_worker
from tests.nats.servers import run
from tests.nats.test_worker_jetstream import dead_letters, handed_off, runs, work

# The worker tests' fixtures: a migrated SQLite database and the handlers' ledger.
db = jetstream_worker.db
ledger = jetstream_worker.ledger

K1 = bytes(range(32))
K2 = bytes(range(64, 96))
SECRET = "carol@example.com"


@pytest.fixture(autouse=True)
def keyring() -> Iterator[None]:
    sealing.configure({"k1": K1})
    yield
    sealing.reset()


def stream_bodies(url: str, stream: str) -> list[bytes]:
    """Every message body in ``stream``, read by sequence (not consumed)."""

    async def read(js: Any) -> list[bytes]:
        state = (await js.stream_info(stream)).state
        out = []
        for seq in range(state.first_seq, state.last_seq + 1):
            try:
                out.append(bytes((await js.get_msg(stream, seq)).data))
            except NotFoundError:
                continue
        return out

    return run(url, read)


def test_the_broker_holds_ciphertext_and_the_worker_runs_the_plaintext(
    db: Any, nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    ids = handed_off(db, nats_url, queue, 3, "t.ok", payload={"to": SECRET})
    bodies = stream_bodies(nats_url, names.stream(queue))
    assert len(bodies) == 3
    assert all(b.startswith(b'{"$sealed":"v1:k1:') and SECRET.encode() not in b for b in bodies)
    stats = work(nats_url, queue)
    assert stats.succeeded == 3 and runs(ledger) == {i: 1 for i in ids}


def test_a_dead_letters_message_is_sealed_on_the_broker(
    db: Any, nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [fail_id] = handed_off(db, nats_url, queue, 1, "t.fail", payload={"to": SECRET})
    stats = work(nats_url, queue, sleep=1.0)
    if stats.dead < 1:  # the NAK's backoff outlived the empty check: run again
        work(nats_url, queue, sleep=1.0)
    [dead] = dead_letters(nats_url, queue)
    assert dead.message_id == fail_id
    for field in ("payload", "exception_message", "exception_trace"):
        assert str(dead.body[field]).startswith(sealing.MARKER), field
    assert sealing.open_text(dead.body["exception_message"]) == "secret-exception-text"


def test_a_missing_key_parks_the_job_on_the_broker_until_the_key_is_back(
    db: Any, nats_url: str, ledger: Path
) -> None:
    queue = support.queue_name()
    [job_id] = handed_off(db, nats_url, queue, 1, "t.ok", payload={"to": SECRET})
    sealing.configure({"k2": K2})
    work(nats_url, queue)
    assert runs(ledger) == {}
    [dead] = dead_letters(nats_url, queue)
    assert dead.exception_class == "outbox.errors.MissingKey"
    assert str(dead.body["payload"]).startswith('{"$sealed":"v1:k1:')
    sealing.configure({"k2": K2, "k1": K1})
    with Broker(parse_url(nats_url)) as broker:
        assert admin.retry(broker, job_id) == 1
    work(nats_url, queue)
    assert runs(ledger) == {job_id: 1}
