"""Asking before a destructive command, and refusing when nobody can answer.

With no usable standard input (closed, at end of file, ``/dev/null`` under cron or
systemd) a prompt cannot be answered: the command refuses with exit 1 and says to pass
``--yes``, instead of a traceback or a bare "Aborted!". Nothing is changed either way.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

EXIT_REFUSED = 1


def confirm(yes: bool, question: str) -> None:
    """Return when ``--yes`` was given or the operator answers yes; otherwise exit 1."""
    if yes:
        return
    if sys.stdin is None or sys.stdin.closed:
        _refuse("standard input is closed, so nobody can confirm; pass --yes to go ahead")
    try:
        answer = click.confirm(question, default=False)
    except click.Abort:  # end of file, or ^C / ^D at the prompt
        click.echo("", err=True)
        _refuse("no answer on standard input; pass --yes to go ahead without asking")
    except (OSError, RuntimeError):  # stdin unreadable
        _refuse("standard input cannot be read, so nobody can confirm; pass --yes to go ahead")
    if not answer:
        _refuse("not confirmed; nothing was changed")


def _refuse(why: str) -> NoReturn:
    click.echo(f"error: {why}", err=True)
    sys.exit(EXIT_REFUSED)
