"""What every command shares: the database URL and logging level, from ``ctx.obj``."""

from __future__ import annotations

from dataclasses import dataclass

import click

from outbox.cli import preflight
from outbox.db.connection import Connection, Database


@dataclass
class CliContext:
    database_url: str
    log_level: str = "info"

    def database(self) -> Database:
        """The database as given; nothing is checked or created (``migrate``, ``demo``)."""
        return Database(self.database_url)

    def connect(self) -> Connection:
        """A connection to an existing, migrated database; else one clear error.

        A SQLite path that does not exist is an error naming it (never a new empty
        file), and missing tables say to run ``outbox migrate``.
        """
        db = self.database()
        preflight.check_sqlite_file(db)
        conn = db.connect()
        try:
            preflight.check_schema(conn, db)
        except BaseException:
            conn.close()
            raise
        return conn


pass_cli = click.make_pass_decorator(CliContext)
