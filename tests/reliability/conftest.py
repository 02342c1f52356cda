"""Fixtures of the reliability suite: migrated databases with the harness tables, and a
private PostgreSQL cluster that tests may restart (never the shared server)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures import databases as backends
from tests.fixtures import pg_cluster
from tests.fixtures.fault_harness import install_ledger
from tests.fixtures.gaps import Gap, skip_gap
from tests.reliability.report import QUICK_JOBS, SOAK_JOBS

SOAK = os.environ.get("OUTBOX_SOAK", "") not in ("", "0")
# Soak-sized: ``report --soak``, or OUTBOX_SOAK=1 by hand. The report's quick mode sets
# OUTBOX_SOAK too, with its small OUTBOX_SOAK_JOBS: scenarios sized by this stay quick.
SOAK_SIZED = SOAK and int(os.environ.get("OUTBOX_SOAK_JOBS", SOAK_JOBS)) > QUICK_JOBS


def migrated(url: str) -> str:
    with Database(url).connect() as c:
        migrate(c)
    install_ledger(url)
    return url


@pytest.fixture
def ledger_url(database: Database, db_url: str) -> str:
    """A migrated database (every backend) with the harness's ledger tables."""
    install_ledger(db_url)
    return db_url


@pytest.fixture
def sqlite_ledger_url(tmp_path: Path) -> str:
    """The same on SQLite only, for faults that exist only there."""
    return migrated(backends.sqlite_url(tmp_path))


@pytest.fixture(scope="session")
def pg_private() -> Iterator[pg_cluster.PgCluster]:
    """A throwaway PostgreSQL cluster on a free port, always stopped at the end."""
    if "postgresql" not in backends.BACKENDS:
        skip_gap(Gap.POSTGRESQL_NOT_SELECTED)
    if not pg_cluster.available():
        skip_gap(Gap.NO_POSTGRESQL_BINARIES)
    cluster = pg_cluster.PgCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def cluster_url(pg_private: pg_cluster.PgCluster) -> str:
    """A fresh migrated database in the private cluster."""
    name = f"rel_{secrets.token_hex(4)}"
    with psycopg.connect(pg_private.url(), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return migrated(pg_private.url(name))
