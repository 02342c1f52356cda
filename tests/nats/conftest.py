"""The NATS tests' servers: one single server and one three-node cluster per session,
started only when a test asks for them (``tests/nats/servers.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outbox.db.connection import Database
from tests.fixtures.fault_harness import install_ledger
from tests.nats.servers import NatsCluster, NatsServer


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """The session's single server, started again if a test left it down."""
    if nats_server.proc is None or nats_server.proc.poll() is not None:
        nats_server.start()
    return nats_server.url


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def ledger_url(database: Database, db_url: str) -> str:
    """A migrated database with the fault harness's ledger tables (see
    ``tests/fixtures/fault_harness.py``); pick backends with ``parametrize("backend", ...,
    indirect=True)``."""
    install_ledger(db_url)
    return db_url
