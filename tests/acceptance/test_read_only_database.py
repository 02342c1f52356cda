"""A database that refuses to write ends a worker and ``relay --watch`` in one line, exit 1,
as the one-shot relay (issue 38: both retried for ever, ``--stop-when-empty`` included).

Read-only on each backend without touching what other tests share: SQLite, the file made
immutable (``chattr +i``, root included); PostgreSQL, the session's
``default_transaction_read_only`` (a URL option, as a hot standby or an ``ALTER DATABASE
... SET`` gives it); MariaDB, the session's ``TRANSACTION READ ONLY`` (``init_command``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from outbox import Database, Job, push, record
from outbox.db.connection import Connection
from outbox.db.url import make_url
from outbox.errors import ReadOnlyDatabase
from tests.fixtures.read_only import immutable_file
from tests.fixtures.workers import ROOT, count
from tests.ops.grants import SERVER_BACKENDS, GrantedDatabase

APP = "tests.fixtures.apps.control:registry"


@pytest.fixture
def read_only_url(db_url: str, backend: str, conn: Connection, app_conn: Any) -> Iterator[str]:
    """``db_url`` with one job and one pending intent, then read-only for what follows."""
    push(app_conn, Job("c.ran", {}))
    record(app_conn, "k1", Job("c.ran", {}))
    app_conn.commit()
    if backend == "postgresql":
        options = str(make_url(db_url).query["options"])
        ro = quote(f"{options} -cdefault_transaction_read_only=on")
        yield db_url.replace(quote(options), ro)
    elif backend == "mysql":
        yield f"{db_url}?init_command={quote('SET SESSION TRANSACTION READ ONLY')}"
    else:
        with immutable_file(make_url(db_url).database or ""):
            yield db_url


def _outbox(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    return subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", url, "--log-format", "json", *args],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def _ends_in_one_line(done: subprocess.CompletedProcess[str], during: str) -> None:
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"error: {during} failed: ")
    assert "the database refuses writes" in errors[0]
    assert "database_error" not in done.stderr and "batch_failed" not in done.stderr


@pytest.mark.parametrize(
    ("args", "during"),
    [
        (["worker", "default", "--app", APP, "--stop-when-empty"], "claim"),
        (["worker", "default", "--app", APP], "claim"),
        (["relay", "--watch"], "relay batch"),
        (["relay"], "relay batch"),
    ],
)
def test_a_read_only_database_ends_the_command_in_one_line(
    read_only_url: str, conn: Connection, args: list[str], during: str
) -> None:
    _ends_in_one_line(_outbox(read_only_url, *args), during)
    assert (count(conn, "outbox_jobs"), count(conn, "outbox_messages")) == (1, 1)  # unchanged


def test_the_error_is_a_read_only_database_in_the_library(read_only_url: str) -> None:
    from outbox import Relay

    with pytest.raises(ReadOnlyDatabase) as caught, Relay(Database(read_only_url)) as relay:
        relay.run_once()
    assert caught.value.operation == "relay batch" and caught.value.code is not None


@pytest.fixture(scope="module", params=SERVER_BACKENDS)
def granted(request: pytest.FixtureRequest) -> Iterator[GrantedDatabase]:
    """A database with the shipped grants (tests/ops/grants.py), one per server backend."""
    with GrantedDatabase(str(request.param)) as g:
        yield g


def test_a_worker_whose_user_may_not_claim_ends_in_one_line(granted: GrantedDatabase) -> None:
    """The operator role reads the queue but may not claim from it: the worker's claim is
    refused by a grant (SQLSTATE 42501, MariaDB 1142/1143), which no wait fixes either."""
    with Database(granted.admin_url).connect() as c, c.transaction():
        push(c.raw, Job("c.ran", {}))
    done = _outbox(granted.url("operator"), "worker", "default", "--app", APP,
                   "--stop-when-empty")  # fmt: skip
    _ends_in_one_line(done, "claim")
