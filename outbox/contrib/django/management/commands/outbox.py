"""``manage.py outbox <command> [args]``: any ``outbox`` command, on Django's database.

The database URL comes from ``OUTBOX['DATABASE']``'s ``DATABASES`` entry; ``worker``,
``scheduler`` and ``dashboard`` run ``outbox.contrib.django.worker:registry`` (the
project's tasks and ``OUTBOX['REGISTRY']``) unless ``--app`` is given.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox.contrib.django import conf

APP_COMMANDS = ("worker", "scheduler", "dashboard")
DJANGO_APP = "outbox.contrib.django.worker:registry"


class Command(BaseCommand):
    help = "Run an outbox command (worker, relay, status, queue, prune...) on Django's database."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument("args", nargs="*", help="the outbox command and its arguments")
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after "outbox" belongs to the outbox CLI, options included.
        self._called_from_command_line = True
        raise SystemExit(self._run(argv[2:]))

    def handle(self, *args: str, **options: Any) -> None:
        code = self._run(list(args))
        if code:
            raise CommandError(f"outbox {' '.join(args[:1])} exited with {code}", returncode=code)

    def _run(self, args: list[str]) -> int:
        from outbox.cli import main

        try:
            url = conf.url_for(conf.alias())
        except conf.SettingError as exc:
            self.stderr.write(f"error: {exc}")
            return 2
        if args and args[0] in APP_COMMANDS and not _has_app(args):
            args = [args[0], "--app", DJANGO_APP, *args[1:]]
        try:
            main.main(["--database-url", url, *args], prog_name="manage.py outbox",
                      standalone_mode=True)
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
        return 0


def _has_app(args: list[str]) -> bool:
    return any(a == "--app" or a.startswith("--app=") for a in args)
