"""The ``outbox`` command line: a thin click layer over the library.

Global settings live in ``ctx.obj`` (a ``CliContext``); every option reads
``OUTBOX_<COMMAND>_<OPTION>`` and global options may come before or after the command
(``outbox.cli.conventions``). Each command group is a module of its own that exports
``commands``, imported when one of them is first used (``outbox.cli.commands``). An
``OutboxError`` becomes one clear line on stderr and exit 1 (with the traceback at
``--log-level debug``); usage errors exit 2.
"""

from __future__ import annotations

import traceback
from typing import Any

import click

from outbox import config, log
from outbox.cli import conventions
from outbox.cli.commands import MODULES, LazyCommands
from outbox.cli.context import CliContext
from outbox.db.connection import Database
from outbox.errors import ConfigurationError, MissingExtra, OutboxError

EXIT_ERROR = 1
HELP_WIDTH = 100  # --help is laid out alike everywhere, so the README can quote it exactly


class _Group(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self.commands, LazyCommands):  # a lazy one applies them on load
            conventions.apply(self)
        return super().main(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, conventions.hoist_globals(args))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutboxError as exc:
            obj = ctx.obj
            if isinstance(obj, CliContext) and obj.log_level == "debug":
                click.echo(traceback.format_exc(), err=True)
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_ERROR)


def _check_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A URL we cannot use is a usage error, found before any command runs; the message
    names the part that is wrong, never a value (it may be a password)."""
    try:
        Database(value)
    except MissingExtra as exc:  # not a usage error: the install lacks a driver (one line)
        click.echo(f"error: {exc}", err=True)
        ctx.exit(EXIT_ERROR)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.group(
    cls=_Group, context_settings={"max_content_width": HELP_WIDTH, "terminal_width": HELP_WIDTH}
)
@click.option(
    "--database-url",
    envvar="OUTBOX_DATABASE_URL",
    default="sqlite:///outbox.db",
    callback=_check_url,
    show_default=True,
    help="sqlite:///PATH, postgresql://USER@HOST/DB or mysql://USER@HOST/DB; the query may "
    "carry libpq keywords (?host=/var/run/postgresql) or PyMySQL's (?unix_socket=...).",
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
    help="Least severe log level written (to stderr).",
)
@click.version_option(package_name="outbox")
@click.pass_context
def main(ctx: click.Context, database_url: str, log_format: str, log_level: str) -> None:
    """Transactional outbox, relay and SQL job queue.

    The global options may be given before or after the command. Exit codes: 0 success,
    1 operational error, 2 usage error, 3 a `status` threshold crossed.
    """
    log.configure(log_format, log_level)  # type: ignore[arg-type]
    try:
        config.check()
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    ctx.obj = CliContext(database_url=database_url, log_level=log_level)


# Each command's module is imported when the command is first looked up (``outbox
# status`` imports none of the worker's), and follows the rules as it arrives.
main.commands = LazyCommands(MODULES, lambda name, cmd: conventions.apply_below(cmd, (name,)))
conventions.apply_root(main)
