"""``manage.py outbox <command> [args]``: any ``outbox`` command, on Django's database
(``outbox.contrib.django.management.cli`` says what differs from the plain CLI)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox.contrib.django import conf

EXIT_USAGE = 2


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
        from outbox.contrib.django.management import cli

        try:
            url = conf.url_for(conf.alias())
        except conf.SettingError as exc:
            self.stderr.write(f"error: {exc}")
            return EXIT_USAGE
        refused = cli.refused_url(args)
        if refused is not None:
            self.stderr.write(f"error: {refused}")
            return EXIT_USAGE
        try:
            cli.command_line(url).main(args, prog_name=cli.PROG, standalone_mode=True)
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
        return 0
