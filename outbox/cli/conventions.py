"""Rules every command follows, applied to the whole command tree in one place.

- Every option reads ``OUTBOX_<COMMAND>_<OPTION>``, named after the command's path and
  the option's long name (``outbox queue jobs --queue`` reads ``OUTBOX_QUEUE_JOBS_QUEUE``),
  and ``--help`` shows the name and the default. Nothing else is read: an environment
  name derived from a Python parameter name (``..._AS_JSON``) would drift from the docs.
- The global options (``--database-url``, ``--log-format``, ``--log-level``) may come
  before or after the command: ``hoist_globals`` moves them in front before parsing.

``apply`` is idempotent and runs when the CLI starts, so a command added by another
module follows the same rules without doing anything; the ``outbox`` root, whose
commands load on first use (``outbox.cli.commands``), applies them to each command as it
loads or is added (``apply_below``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import click

PREFIX = "OUTBOX"
GLOBAL_WITH_VALUE = ("--database-url", "--log-format", "--log-level")
GLOBAL_NOTE = (
    "Global options (--database-url, --log-format, --log-level) may be given before or "
    "after the command; see `outbox --help`."
)
# Environment names kept for existing deployments, read after the rule's own name.
ALIASES: dict[str, tuple[str, ...]] = {
    "OUTBOX_WORKER_APP": ("OUTBOX_APP",),
    "OUTBOX_SCHEDULER_APP": ("OUTBOX_APP",),
    "OUTBOX_SCHEDULE_LIST_APP": ("OUTBOX_APP",),
    "OUTBOX_WORKER_METRICS_PORT": ("OUTBOX_METRICS_PORT",),
    "OUTBOX_RELAY_METRICS_PORT": ("OUTBOX_METRICS_PORT",),
    "OUTBOX_WORKER_METRICS_BIND": ("OUTBOX_METRICS_BIND",),
    "OUTBOX_RELAY_METRICS_BIND": ("OUTBOX_METRICS_BIND",),
}


def walk(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command below ``command`` (groups included) with its path of names."""
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from walk(command.commands[name], (*path, name))


def env_name(path: Sequence[str], option: click.Option) -> str:
    """``OUTBOX_<COMMAND>_<OPTION>`` after the option's longest long name."""
    longs = [o for o in option.opts if o.startswith("--")]
    name = max(longs, key=len).lstrip("-")
    parts = [PREFIX, *path, name]
    return "_".join(p.upper().replace("-", "_") for p in parts)


def apply(root: click.Group) -> None:
    """Give every option of every subcommand its environment name, show it and the
    default in ``--help``, and note on every subcommand where global options go."""
    apply_root(root)
    for name in sorted(root.commands):
        apply_below(root.commands[name], (name,))


def apply_root(root: click.Group) -> None:
    """The root's own options show the environment name each reads."""
    for param in root.params:
        if isinstance(param, click.Option) and param.envvar:
            param.show_envvar = True


def apply_below(top: click.Command, path: tuple[str, ...]) -> None:
    """``apply`` for one top-level command (at ``path``) and everything below it: the
    root's lazily loaded commands get it one by one, as each is imported."""
    for below, command in walk(top, path):
        _apply_command(below, command)


def _apply_command(path: tuple[str, ...], command: click.Command) -> None:
    command.epilog = command.epilog or GLOBAL_NOTE
    for param in command.params:
        if isinstance(param, click.Option):
            name = env_name(path, param)
            param.envvar = [name, *ALIASES.get(name, ())]
            param.show_envvar = True
            param.allow_from_autoenv = False
            if not param.is_flag and param.default is not None:
                param.show_default = True


def hoist_globals(args: Sequence[str]) -> list[str]:
    """``cmd ... --database-url X ...`` → ``--database-url X cmd ...`` (before ``--``)."""
    args = list(args)
    start = _command_index(args)
    if start is None:
        return args
    front, rest = args[:start], []
    i = start
    while i < len(args):
        token = args[i]
        if token == "--":
            rest.extend(args[i:])
            break
        if token in GLOBAL_WITH_VALUE:  # a missing value is then reported by the root
            front.extend(args[i : i + 2])
            i += 2
            continue
        if token.split("=", 1)[0] in GLOBAL_WITH_VALUE and "=" in token:
            front.append(token)
        else:
            rest.append(token)
        i += 1
    return front + rest


def _command_index(args: Sequence[str]) -> int | None:
    i = 0
    while i < len(args):
        token = args[i]
        if token in GLOBAL_WITH_VALUE:
            i += 2
        elif token.startswith("-"):
            i += 1
        else:
            return i
    return None
