"""``outbox keys status/rotate`` and ``outbox queue failed ID`` with encryption at rest,
through click's runner on every backend: the keyring from ``OUTBOX_ENCRYPTION_KEYS``
(a bad one exits 2 naming the key id, never the key), counts per key id, rotation, and
a dead letter's message opened only when this process has its key."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from outbox import Job, PermanentFailure, Registry, record, sealing
from outbox.cli import main
from outbox.db.connection import Database
from outbox.queue import Worker, WorkerConfig, push

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(64, 96))).decode()
SECRET = "erin@example.com"
registry = Registry()


@registry.job("cli.enc")
def refuse(payload: Any, ctx: Any) -> None:
    raise PermanentFailure(f"no mailbox {payload['to']}")


@pytest.fixture(autouse=True)
def _fresh_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(sealing.ENV_KEYS, f"k1:{K1}")
    sealing.reset()
    yield
    sealing.reset()


def _cli(db_url: str, *args: str, keys: str | None = None) -> tuple[int, str]:
    sealing.reset()  # the CLI reads the keyring from the environment, as a new process
    env = None if keys is None else {sealing.ENV_KEYS: keys}
    result = CliRunner().invoke(main, ["--database-url", db_url, *args], env=env)
    return result.exit_code, result.output


def _tx(database: Database, fn: Any) -> Any:
    with database.connect() as c:
        return c.transact(lambda t: fn(t.raw), operation="test")


def test_a_bad_keyring_is_a_usage_error_naming_the_key_id(database: Database, db_url: str) -> None:
    code, out = _cli(db_url, "keys", "status", keys=f"k1:{K1},k1:{K2}")
    assert code == 2 and "'k1' is given twice" in out and K1 not in out
    code, out = _cli(db_url, "status", keys=f"short:{base64.b64encode(b'x' * 8).decode()}")
    assert code == 2 and "'short' is 8 bytes; AES-256 needs 32" in out


def test_keys_status_and_rotate(database: Database, db_url: str) -> None:
    for n in range(3):
        _tx(database, lambda c, n=n: record(c, f"k{n}", Job("cli.enc", {"to": SECRET, "n": n})))
    code, out = _cli(db_url, "keys", "status", "--json")
    assert code == 0, out
    data = orjson.loads(out)
    assert data["current"] == "k1" and data["keys"] == {"k1": 3}
    assert data["tables"]["outbox_messages"] == {"k1": 3}
    code, out = _cli(db_url, "keys", "rotate", "--batch", "2", keys=f"k2:{K2},k1:{K1}")
    assert code == 0 and "under key k2: 3 rows" in out, out
    code, out = _cli(db_url, "keys", "status", keys=f"k2:{K2}")
    assert code == 0 and "encrypting with: k2" in out and "k2" in out and "k1" not in out
    assert SECRET not in out


def test_queue_failed_opens_the_message_only_with_the_key(database: Database, db_url: str) -> None:
    sealing.configure({"k1": base64.b64decode(K1)})
    message_id = _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.05)) as w:
        w.run()
    code, out = _cli(db_url, "queue", "failed", "--show", message_id)
    assert code == 0 and f"PermanentFailure: no mailbox {SECRET}" in out, out
    code, out = _cli(db_url, "queue", "failed", "--show", message_id, keys=f"k2:{K2}")
    assert code == 0 and SECRET not in out
    assert "PermanentFailure: encrypted (key k1, " in out
