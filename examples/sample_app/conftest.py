"""Rollback per test: each test runs in a transaction that is never committed."""

import os
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.orm import Session

from shop.models import Base

URL = os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop-test.db")


@pytest.fixture(scope="session")
def engine():
    subprocess.run([sys.executable, "-m", "outbox", "--database-url", URL, "migrate"], check=True)
    engine = create_engine(URL)
    if engine.dialect.name == "sqlite":
        sqlite_savepoints(engine)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine):
    with engine.connect() as connection:
        transaction = connection.begin()
        with Session(bind=connection, join_transaction_mode="create_savepoint") as session:
            yield session
        transaction.rollback()


def sqlite_savepoints(engine):
    """SQLAlchemy's recipe for SAVEPOINT on pysqlite: let SQLAlchemy emit BEGIN itself.

    Without it, the sqlite3 module starts no transaction before the first SAVEPOINT,
    so releasing that savepoint would commit the test's writes.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, connection_record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(connection):
        connection.exec_driver_sql("BEGIN")
