"""``manage.py outbox``: the ``outbox`` command line with Django's settings in place of
what the plain one is told on its command line.

- **The database is Django's**: ``OUTBOX['DATABASE']``'s ``DATABASES`` entry
  (``conf.url_for``). There is no ``--database-url``: given, it is refused by name (exit
  2), and ``OUTBOX_DATABASE_URL`` is not read, so the two can never disagree.
- **Not offered**: ``demo`` (it would write its jobs into the application's database),
  ``init`` (a starter module for ``outbox worker --app``; a Django project has its
  apps' ``tasks.py``) and ``migrate`` (``manage.py migrate`` creates the tables, and
  records that it did). Each is refused with what to do instead.
- **The project's registry**: ``worker``, ``scheduler``, ``dashboard`` and ``schedule
  list`` run ``outbox.contrib.django.worker:registry`` (the apps' tasks beside
  ``OUTBOX['REGISTRY']``) unless ``--app`` is given. It is loaded before the command
  runs, so a wrong ``OUTBOX['REGISTRY']`` is one line naming that setting (which
  ``manage.py check`` reports too, as ``outbox.E004``), never ``--app``; and a
  ``scheduler`` with no periodic job to record says so.
- **Missing tables** are said naming ``manage.py migrate`` (``schema.unusable``),
  before a command that needs them starts; a database that does not answer is left to
  the command, which waits for it or says why.
- The global options go before or after the command, as on the plain CLI: this group is
  the plain one's class, and click finds the command, whatever comes before it.
"""

from __future__ import annotations

import inspect
from typing import Any, NoReturn

import click

from outbox.cli import _Group
from outbox.cli import main as plain
from outbox.contrib.django import conf, schema
from outbox.errors import ConfigurationError

PROG = "manage.py outbox"
DJANGO_APP = "outbox.contrib.django.worker:registry"
EXIT_USAGE = 2
# The commands (by path) that take --app, and the ones this CLI does not offer.
APP_COMMANDS = frozenset({("worker",), ("scheduler",), ("dashboard",), ("schedule", "list")})
NOT_OFFERED = {
    "demo": "it would write its jobs into your application's database; run `outbox demo` "
    "outside Django, on a database of its own",
    "init": "it writes a starter jobs module for `outbox worker --app`; under Django, write "
    "tasks in your apps' tasks.py (manage.py outbox worker runs them)",
    "migrate": "under Django, `manage.py migrate` creates and upgrades the outbox tables",
}
_URL_OPTION = "--database-url"


class DjangoGroup(_Group):
    """The plain CLI's group, its command found by click, then given Django's registry."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in NOT_OFFERED:
            _refuse(ctx, f"`{PROG} {args[0]}` is not offered: {NOT_OFFERED[args[0]]}")
        name, command, rest = super().resolve_command(ctx, args)
        if ctx.resilient_parsing or "--help" in rest or name is None:
            return name, command, rest
        path = (name, *rest[:1])
        if (path[:1] in APP_COMMANDS or path in APP_COMMANDS) and not _has_app(rest):
            _project_registry(ctx, name)
            at = len(path) - 1
            rest = [*rest[:at], "--app", DJANGO_APP, *rest[at:]]
        problem = schema.unusable(conf.alias())
        if problem is not None:
            raise ConfigurationError(problem)  # said as every OutboxError is: one line, exit 1
        return name, command, rest


def command_line(url: str) -> DjangoGroup:
    """The ``manage.py outbox`` group on the database at ``url`` (Django's)."""

    def settle(**options: Any) -> None:
        assert plain.callback is not None
        plain.callback(database_url=url, **options)  # its click context is this group's

    return DjangoGroup(
        name="outbox",
        commands={n: c for n, c in plain.commands.items() if n not in NOT_OFFERED},
        params=[p for p in plain.params if p.name != "database_url"],
        callback=settle,
        help=inspect.cleandoc(plain.help or "")
        + "\n\nUnder manage.py the database is Django's (settings.OUTBOX['DATABASE']).",
        context_settings=plain.context_settings,
    )


def refused_url(args: list[str]) -> str | None:
    """The refusal of a ``--database-url`` given anywhere before ``--``, or None."""
    for token in args:
        if token == "--":
            return None
        if token == _URL_OPTION or token.startswith(f"{_URL_OPTION}="):
            return (
                f"{PROG} runs on Django's database, settings.OUTBOX['DATABASE'] "
                f"({conf.setting()['DATABASE']!r} in DATABASES); it takes no {_URL_OPTION}"
            )
    return None


def _project_registry(ctx: click.Context, name: str) -> None:
    """Load the project's registry now: its problems in the words of Django's settings."""
    from outbox.queue.loading import load_registry

    try:
        plain_registry = conf.registry()  # OUTBOX['REGISTRY'] on its own, named
        load_registry(DJANGO_APP)  # the apps' tasks modules with it
    except (conf.SettingError, ConfigurationError) as exc:
        _refuse(ctx, str(exc))
    # Periodic jobs come from OUTBOX['REGISTRY'] alone: django.tasks has none.
    if name == "scheduler" and (plain_registry is None or not len(plain_registry.schedules)):
        spec = conf.setting()["REGISTRY"]
        where = (
            f"settings.OUTBOX['REGISTRY'] ({spec!r}) declares none"
            if spec else "settings.OUTBOX['REGISTRY'] is not set"
        )
        _refuse(ctx, f"no periodic jobs to record: {where} (Django tasks are never periodic)")


def _refuse(ctx: click.Context, message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_USAGE)


def _has_app(args: list[str]) -> bool:
    return any(a == "--app" or a.startswith("--app=") for a in args)
