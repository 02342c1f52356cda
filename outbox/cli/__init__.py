"""The ``outbox`` command line: a thin click layer over the library.

Global settings live in ``ctx.obj`` (a ``CliContext``); every option has an
``OUTBOX_*`` environment variable. Each command group is a module of its own that
exports ``commands``. An ``OutboxError`` becomes one clear line on stderr and exit 1
(with the traceback at ``--log-level debug``); usage errors exit 2.
"""

from __future__ import annotations

import traceback
from typing import Any

import click

from outbox import log
from outbox.cli import dashboard, migrate, queue, relay
from outbox.cli.context import CliContext
from outbox.errors import OutboxError

EXIT_ERROR = 1


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutboxError as exc:
            obj = ctx.obj
            if isinstance(obj, CliContext) and obj.log_level == "debug":
                click.echo(traceback.format_exc(), err=True)
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_ERROR)


@click.group(cls=_Group, context_settings={"auto_envvar_prefix": "OUTBOX"})
@click.option(
    "--database-url",
    envvar="OUTBOX_DATABASE_URL",
    default="sqlite:///outbox.db",
    show_default=True,
    help="sqlite:///PATH, postgresql://USER@HOST/DB or mysql://USER@HOST/DB.",
)
@click.option(
    "--log-format",
    envvar="OUTBOX_LOG_FORMAT",
    type=click.Choice(["json", "console", "auto"]),
    default="auto",
    show_default=True,
    help="auto: console on a terminal, JSON lines otherwise.",
)
@click.option(
    "--log-level",
    envvar="OUTBOX_LOG_LEVEL",
    type=click.Choice(log.LEVELS),
    default="info",
    show_default=True,
)
@click.version_option(package_name="outbox")
@click.pass_context
def main(ctx: click.Context, database_url: str, log_format: str, log_level: str) -> None:
    """Transactional outbox, relay and SQL job queue."""
    log.configure(log_format, log_level)  # type: ignore[arg-type]
    ctx.obj = CliContext(database_url=database_url, log_level=log_level)


for _module in (migrate, relay, queue, dashboard):
    for _command in _module.commands:
        main.add_command(_command)
