"""Every ``outbox`` command line in ops/ (systemd units, Kubernetes manifests, cron) is
one the CLI accepts: each option exists and each value parses."""

from __future__ import annotations

import json
import re
import shlex

import click
import pytest

from outbox.cli import main
from tests.fixtures.workers import ROOT


def _command_lines() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in sorted((ROOT / "ops").rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        for flow in re.findall(r"command: (\[[^\]]*\])", text):
            found.append((name, json.loads(flow)))
        for line in re.findall(r"^ExecStart=(.*)$", text, re.M):
            found.append((name, shlex.split(line)))
        for line in re.findall(r"(/\S*outbox status [^>|;]*)", text):
            found.append((name, shlex.split(line)))
    return [(n, argv) for n, argv in found if argv and argv[0].endswith("outbox")]


def _parse(group: click.Group, args: list[str], parent: click.Context | None = None) -> None:
    ctx = group.make_context(group.name or "outbox", list(args), parent=parent)
    rest = [*ctx._protected_args, *ctx.args]
    command = group.get_command(ctx, rest[0])
    assert command is not None, f"no command {rest[0]!r}"
    if isinstance(command, click.Group):
        _parse(command, rest[1:], ctx)
    else:
        command.make_context(rest[0], rest[1:], parent=ctx)


@pytest.mark.parametrize("where,argv", _command_lines(), ids=lambda v: str(v))
def test_ops_command_lines_parse(where: str, argv: list[str]) -> None:
    args = [a.replace("%i", "search").replace("${OUTBOX_APP}", "myapp.jobs:registry") for a in argv]
    _parse(main, args[1:])


def test_the_examples_include_the_probes_and_scrapes() -> None:
    lines = [argv for _, argv in _command_lines()]
    # relay and worker: the Kubernetes manifests and the systemd units
    assert sum("--metrics-port" in argv for argv in lines) == 4
