"""Which ``Driver`` serves which dialect: a fourth dialect is one more entry here."""

from __future__ import annotations

from outbox.db.dialect import Dialect
from outbox.db.driver import Driver
from outbox.db.mysql import MysqlDriver
from outbox.db.postgresql import PostgresqlDriver
from outbox.db.sqlite import SqliteDriver

DRIVERS: dict[str, type[Driver]] = {
    d.dialect.name: d for d in (SqliteDriver, PostgresqlDriver, MysqlDriver)
}


def driver_class(dialect: Dialect) -> type[Driver]:
    return DRIVERS[dialect.name]
