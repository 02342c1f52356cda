"""What every command shares: the database URL and logging level, from ``ctx.obj``."""

from __future__ import annotations

from dataclasses import dataclass

import click

from outbox.db.connection import Connection, Database


@dataclass
class CliContext:
    database_url: str
    log_level: str = "info"

    def database(self) -> Database:
        return Database(self.database_url)

    def connect(self) -> Connection:
        return self.database().connect()


pass_cli = click.make_pass_decorator(CliContext)
