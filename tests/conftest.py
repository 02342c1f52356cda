"""Shared fixtures: one suite runs against every backend.

``db_url`` is an empty database of its own for each test, on each backend in
``tests.fixtures.databases.BACKENDS``; ``database`` is the same, migrated; ``conn`` is an
internal ``outbox.db.Connection`` to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from tests.fixtures import databases as backends
from tests.fixtures import recycle
from tests.fixtures.factories import Rows

pytest_plugins = ["tests.fixtures.tiers", "tests.fixtures.private_servers"]


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """The CLI points structlog at click's captured stderr; undo that after every test."""
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session")
def _servers() -> Iterator[dict[str, Any]]:
    runs: dict[str, Any] = {}
    if "postgresql" in backends.BACKENDS:
        runs["postgresql"] = backends.PgRun()
    if "mysql" in backends.BACKENDS:
        runs["mysql"] = backends.MysqlRun()
    yield runs
    for run in runs.values():
        run.close()


@pytest.fixture(params=backends.BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _migrate(url: str) -> None:
    with Database(url).connect() as c:
        migrate(c)


@pytest.fixture
def db_url(
    backend: str, _servers: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """An empty database, not yet migrated; migrated already when the test asks for
    ``database`` too (then perhaps one an earlier test used, emptied: ``recycle``)."""
    if backend == "sqlite":
        with backends.sqlite_test_url(tmp_path) as url:
            yield url
        return
    run = _servers[backend]
    if recycle.REUSE and "database" in request.fixturenames:
        url = run.migrated_url(_migrate)
        yield url
        run.give_back(url)
        return
    url = run.new_url()
    yield url
    run.drop_url(url)


@pytest.fixture
def database(db_url: str, backend: str, _servers: dict[str, Any]) -> Database:
    """A migrated database."""
    run = _servers.get(backend)
    if run is None or not run.migrated(db_url):
        _migrate(db_url)
    return Database(db_url)


@pytest.fixture
def conn(database: Database) -> Iterator[Connection]:
    """An internal connection (autocommit outside ``transaction()``)."""
    c = database.connect()
    yield c
    c.close()


@pytest.fixture
def app_conn(database: Database, db_url: str) -> Iterator[Any]:
    """A plain DB-API connection as an application opens it, to the migrated database."""
    c = backends.raw_connect(db_url)
    yield c
    try:
        c.rollback()
    finally:
        c.close()


@pytest.fixture
def rows(conn: Connection) -> Rows:
    """The row factories (``tests/fixtures/factories.py``), writing through ``conn``."""
    return Rows(conn)
