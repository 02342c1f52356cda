"""The dashboard with encryption at rest, mounted and served by uvicorn over real HTTP:
every viewer sees that a payload is encrypted and its size; a signed-in viewer of a
``show_payloads`` dashboard sees the payload and the dead letter's message opened, and
only while this process has the key."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from outbox import Job, PermanentFailure, Registry, sealing
from outbox.dashboard import create_app
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import Worker, WorkerConfig, push
from tests.dashboard.client import HTML, get, post
from tests.dashboard.conftest import TOKEN
from tests.fixtures.ports import free_port

K1 = bytes(range(32))
SECRET = "dave@example.com"
registry = Registry()


@registry.job("dash.enc")
def refuse(payload: Any, ctx: Any) -> None:
    raise PermanentFailure(f"no mailbox {payload['to']}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(base URL, message id of a sealed dead letter)."""
    sealing.configure({"k1": K1})
    db_url = f"sqlite:///{tmp_path / 'enc.db'}"
    database = Database(db_url)
    with database.connect() as conn:
        migrate(conn)
        message_id = conn.transact(lambda t: push(t.raw, Job("dash.enc", {"to": SECRET})),
                                   operation="test")
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.05)) as w:
        w.run()
    app = create_app(db_url, token=TOKEN, show_payloads=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{server.config.port}", message_id
    server.should_exit = True
    thread.join(30)
    sealing.reset()


def _signed_in(base: str) -> str:
    login = get(base + "/login", headers=HTML)
    cookie = login.header("set-cookie").split(";", 1)[0]
    csrf = login.body.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    signed = post(base + "/login", form={"token": TOKEN, "csrf": csrf},
                  headers={**HTML, "Cookie": cookie})
    return signed.header("set-cookie").split(";", 1)[0]


def test_every_viewer_sees_encrypted_and_its_size_the_signed_in_one_the_opened_text(
    served: tuple[str, str],
) -> None:
    base, message_id = served
    anonymous = get(base + f"/jobs/{message_id}", headers=HTML).body
    assert "Stored encrypted (key k1, " in anonymous and " bytes)" in anonymous
    assert SECRET not in anonymous
    cookie = _signed_in(base)
    shown = get(base + f"/jobs/{message_id}", headers={**HTML, "Cookie": cookie}).body
    assert f"no mailbox {SECRET}" in shown  # the dead letter's message, opened
    assert SECRET in shown.split('id="payload"', 1)[1]  # the payload, opened
    sealing.configure({"k9": bytes(32)})  # this process lost k1
    without = get(base + f"/jobs/{message_id}", headers={**HTML, "Cookie": cookie}).body
    assert SECRET not in without
    assert without.count("encrypted (key k1, ") >= 3  # payload, message and trace
