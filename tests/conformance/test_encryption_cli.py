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
from structlog.testing import capture_logs

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
    assert "PAYLOAD:     encrypted (key k1, " in out and "bytes)" in out


def _envelope_of(database: Database, message_id: str) -> str:
    with database.connect() as c:
        return str(
            c.execute_sql(
                f"SELECT payload FROM outbox_failed_jobs WHERE message_id = '{message_id}'"
            )[0][0]
        )


def test_queue_failed_shows_the_payloads_size_and_key_never_the_payload(
    database: Database, db_url: str
) -> None:
    sealing.configure(None)
    plain_id = _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    sealing.configure({"k1": base64.b64decode(K1)})
    sealed_id = _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.05)) as w:
        w.run()
    size = len(_envelope_of(database, sealed_id))
    for keys in (f"k1:{K1}", f"k2:{K2}"):  # with and without the payload's key
        code, out = _cli(db_url, "queue", "failed", "--show", sealed_id, keys=keys)
        assert code == 0 and f"PAYLOAD:     encrypted (key k1, {size} bytes)\n" in out, out
        assert '"to"' not in out and K1 not in out
    code, out = _cli(db_url, "queue", "failed", "--show", plain_id)
    plain = len(_envelope_of(database, plain_id))
    assert code == 0 and f"PAYLOAD:     {plain} bytes, not encrypted\n" in out, out
    assert '"to"' not in out


def test_status_says_whether_this_process_encrypts_and_rows_per_key(
    database: Database, db_url: str
) -> None:
    sealing.configure(None)
    _tx(database, lambda c: record(c, "plain", Job("cli.enc", {"to": SECRET})))
    sealing.configure({"k1": base64.b64decode(K1)})
    for n in range(2):
        _tx(database, lambda c, n=n: record(c, f"s{n}", Job("cli.enc", {"to": SECRET, "n": n})))
    _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    code, out = _cli(db_url, "status", "--json", keys=f"k2:{K2},k1:{K1}")
    assert code == 0, out
    assert orjson.loads(out)["encryption"] == {
        "on": True,
        "sealing_key": "k2",
        "keyring": ["k2", "k1"],
        "rows": {"k1": 3, "plaintext": 1},
        "not_in_keyring": [],
    }
    code, out = _cli(db_url, "status", keys=f"k2:{K2}")
    assert code == 0, out
    assert "encryption: on, encrypting with k2 (keyring: k2)\n" in out
    assert "stored rows by key: k1 3 (not in this keyring), plaintext 1" in out
    code, out = _cli(db_url, "status", "--json", keys="")
    assert orjson.loads(out)["encryption"]["on"] is False
    assert orjson.loads(out)["encryption"]["not_in_keyring"] == ["k1"]
    for text in (out, _cli(db_url, "status")[1]):
        assert SECRET not in text and K1 not in text and K2 not in text


def _logged_run(database: Database) -> list[dict[str, Any]]:
    worker = Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.05))
    with capture_logs() as logs, worker:
        worker.run()
    return logs


def test_the_workers_logs_say_the_key_id_and_size_never_the_payload_or_key(
    database: Database,
) -> None:
    sealing.configure({"k1": base64.b64decode(K1), "k2": base64.b64decode(K2)})
    message_id = _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    logs = _logged_run(database)
    started = next(e for e in logs if e["event"] == "worker.started")
    assert started["encryption"] == "k1" and started["keyring"] == ["k1", "k2"]
    dead = next(e for e in logs if e["event"] == "job.dead")
    size = len(_envelope_of(database, message_id))
    assert dead["payload_key"] == "k1" and dead["payload_bytes"] == size
    shown = repr(logs)
    assert SECRET not in shown and K1 not in shown and "no mailbox" not in shown
    sealing.configure(None)
    _tx(database, lambda c: push(c, Job("cli.enc", {"to": SECRET})))
    logs = _logged_run(database)
    assert next(e for e in logs if e["event"] == "worker.started")["encryption"] == "off"
    dead = next(e for e in logs if e["event"] == "job.dead")
    assert dead["payload_key"] is None and dead["payload_bytes"] == len(f'{{"to":"{SECRET}"}}')
    assert SECRET not in repr(logs)


def test_status_text_says_nothing_of_encryption_when_none_is_used(
    database: Database, db_url: str
) -> None:
    sealing.configure(None)
    _tx(database, lambda c: record(c, "plain", Job("cli.enc", {"to": SECRET})))
    code, out = _cli(db_url, "status", keys="")
    assert code == 0 and "encryption" not in out and "stored rows" not in out, out
