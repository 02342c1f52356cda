"""Which module holds each top-level command, and the root's mapping that imports a
command's module only when the command is first used.

Every ``outbox`` process is a fresh interpreter: importing every command module (the
worker, relay, scheduler, dashboard and their libraries) cost each one ~0.1 s of CPU,
whatever it was asked to do. Now ``outbox status`` imports ``relay`` (where it lives)
and nothing of the worker's. ``outbox --help`` lists every command, so it loads them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping

import click

# module of outbox.cli -> the commands it exports (its ``commands`` list, by name)
MODULES: dict[str, tuple[str, ...]] = {
    "migrate": ("migrate",),
    "relay": ("relay", "status", "failed", "retry", "prune"),
    "queue": ("worker", "queue", "demo"),
    "scheduler": ("scheduler", "schedule"),
    "init": ("init",),
    "dashboard": ("dashboard",),
    "result": ("result",),
    "workflow": ("workflow",),
    "keys": ("keys",),
    "schema": ("schema",),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name (what click's ``Group.commands`` holds), each module
    imported on the first lookup of one of its commands; ``prepare(name, command)`` is
    called on each command as it arrives, loaded or added (``outbox.cli.conventions``)."""

    def __init__(
        self,
        modules: dict[str, tuple[str, ...]],
        prepare: Callable[[str, click.Command], None],
    ) -> None:
        self._module_of = {name: module for module, names in modules.items() for name in names}
        self._loaded: dict[str, click.Command] = {}
        self._prepare = prepare

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module = self._module_of[name]  # KeyError: no such command
            for command in importlib.import_module(f"outbox.cli.{module}").commands:
                assert command.name is not None, command
                if command.name not in self._loaded:
                    self[command.name] = command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._prepare(name, command)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._module_of.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._module_of), **dict.fromkeys(self._loaded)})

    def __len__(self) -> int:
        return len(self._module_of.keys() | self._loaded.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._module_of or name in self._loaded
