"""The Redis worker tests' own side of the stream: entries written as the relay writes
them (``outbox.queue.redis.names``: the JetStream headers of ``codec.job_headers`` plus
``data``), so these tests do not depend on the relay, and reads that do not consume.

The server is the shared one at 127.0.0.1:6379, db 0, which other runs use too: every
test takes a queue name of its own (``queue_name``) and deletes only that queue's keys
(``drop``), never the whole database."""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

import orjson
import pytest
import redis

from outbox.jetstream import codec
from outbox.queue.redis import names

URL = "redis://127.0.0.1:6379/0"


def client() -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=6379, db=0)


def queue_name(prefix: str = "rq") -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def add_job(
    r: redis.Redis,
    queue: str,
    job: str,
    payload: Any = None,
    *,
    priority: int = 0,
    max_attempts: int | None = None,
    available_at_ms: int = 0,
) -> str:
    """One job entry on ``queue``'s band ``priority``, as the relay XADDs it; its id."""
    message_id = str(uuid.uuid4())
    headers = codec.job_headers(
        message_id, job, max_attempts, available_at_ms, int(time.time() * 1000)
    )
    fields: dict[str, Any] = {**headers, names.DATA_FIELD: orjson.dumps(payload)}
    r.xadd(names.stream(queue, priority), fields)
    return message_id


def add_jobs(r: redis.Redis, queue: str, n: int, job: str = "t.ok") -> list[str]:
    return [add_job(r, queue, job, {"i": i}) for i in range(n)]


def dead(r: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The dead-letter records on ``queue``'s dead stream, oldest first."""
    return [orjson.loads(f[b"data"]) for _, f in r.xrange(names.dead_stream(queue))]


def left(r: redis.Redis, queue: str) -> int:
    """Entries still on the queue's job streams plus jobs in its delayed set."""
    return sum(r.xlen(s) for s in names.job_streams(queue)) + r.zcard(names.delayed_key(queue))


def drop(r: redis.Redis, queue: str) -> None:
    keys = list(r.scan_iter(match=names.tag(queue).replace("{", "\\{").replace("}", "\\}") + "*"))
    if keys:
        r.delete(*keys)


@pytest.fixture
def rq() -> Any:
    """A queue of this test's own, its keys deleted afterwards, and a client."""
    r = client()  # the shared server is a service of every run (SERVICES.md), as NATS is
    queue = queue_name()
    yield r, queue
    drop(r, queue)
    r.close()


@pytest.fixture
def ledger(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The file ``tests.nats.app``'s handlers append each run to (``NATS_TEST_LEDGER``)."""
    path = tmp_path / "ledger.txt"
    path.touch()
    monkeypatch.setenv("NATS_TEST_LEDGER", str(path))
    return path


PASSWORD = "s3cret-redis-pass"


@pytest.fixture(scope="session")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A private Redis that asks for a password (the shared one asks for none, so any
    password connects there): started once per session; its port."""
    import subprocess

    from tests.fixtures.ports import free_port

    port = free_port()
    folder = tmp_path_factory.mktemp("redis-locked")
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(folder)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD)
    for _ in range(200):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    yield port
    proc.terminate()
    proc.wait(10)
