"""The generated parts of the site's reference pages, rendered from the code itself.

``python -m tests.docs.reference`` rewrites every block between a pair of markers
``<!-- generated: NAME ... -->`` / ``<!-- generated: end -->`` in ``docs/reference/``;
``tests/docs/test_reference.py`` fails when a page and the code differ. The blocks:

- ``cli``: every command's ``--help``, in command order (``docs/reference/cli.md``);
- ``env``: every command-line option's environment variables and default, from the same
  command tree (``docs/reference/settings.md``);
- ``configs``: the fields of ``RelayConfig`` and ``WorkerConfig`` with their defaults;
- ``tables``: every table of ``outbox.schemas.tables.metadata`` with its columns and
  indexes (``docs/reference/tables.md``);
- ``schemas``: the output of ``outbox schema JOB`` for each typed job of the example app
  (``examples/sample_app``), run there as a user runs it (``docs/reference/example-schemas.md``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner
from sqlalchemy import UniqueConstraint

from outbox.cli import main
from outbox.cli.conventions import walk

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
START = "<!-- generated: {name} (python -m tests.docs.reference) -->"
END = "<!-- generated: end -->"
BLOCK = re.compile(
    r"<!-- generated: (?P<name>[a-z]+) \(python -m tests\.docs\.reference\) -->\n"
    r".*?<!-- generated: end -->",
    re.S,
)


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="outbox")
    assert result.exit_code == 0, result.output
    return result.output.rstrip() + "\n"


def _cli() -> list[str]:
    """Every command's ``--help``, in command order, one heading per command."""
    parts: list[str] = []
    for path, _ in walk(main):
        name = " ".join(("outbox", *path))
        parts += [f"### `{name}`", "", "```text", help_text(path).rstrip("\n"), "```", ""]
    return parts


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(param: click.Parameter) -> str:
    value = param.default
    if value is True:
        return "`true`"
    if value in (None, (), False) or type(value).__name__ == "Sentinel":  # click's UNSET
        return "-"
    return f"`{_cell(str(value))}`"


def _env() -> list[str]:
    """One row per option: its environment variables (first wins) and its default."""
    rows = ["| environment variable | option | command | default |", "| --- | --- | --- | --- |"]
    for path, command in walk(main):
        for param in command.params:
            if not isinstance(param, click.Option) or not param.envvar:
                continue
            env = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            names = ", ".join(f"`{e}`" for e in env)
            option = max((o for o in param.opts if o.startswith("--")), key=len)
            where = f"`outbox {' '.join(path)}`" if path else "`outbox` (global)"
            rows.append(f"| {names} | `{option}` | {where} | {_default(param)} |")
    return [*rows, ""]


def _field_default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    if field.default_factory is not dataclasses.MISSING:
        return f"`{field.default_factory()!r}`"
    return "required"


def _configs() -> list[str]:
    from outbox import RelayConfig, WorkerConfig

    out: list[str] = []
    for cls in (RelayConfig, WorkerConfig):
        out += [f"`outbox.{cls.__name__}`:", "", "| field | type | default |"]
        out.append("| --- | --- | --- |")
        for field in dataclasses.fields(cls):
            out.append(f"| `{field.name}` | `{_cell(str(field.type))}` | {_field_default(field)} |")
        out.append("")
    return out


def _tables() -> list[str]:
    from outbox.schemas.tables import metadata

    out: list[str] = []
    for table in metadata.sorted_tables:
        out += [f"### `{table.name}`", ""]
        if table.comment:
            out += [table.comment, ""]
        out += ["| column | type | null | default | key |", "| --- | --- | --- | --- | --- |"]
        for col in table.columns:
            default = "-"
            if col.identity is not None:
                default = "identity"
            elif col.server_default is not None:
                arg = getattr(col.server_default, "arg", col.server_default)
                default = f"`{_cell(str(getattr(arg, 'text', arg)))}`"
            key = "primary" if col.primary_key else ""
            null = "yes" if col.nullable else "no"
            out.append(f"| `{col.name}` | `{col.type.compile()}` | {null} | {default} | {key} |")
        indexes = sorted(table.indexes, key=lambda i: i.name or "")
        uniques = sorted(
            (c for c in table.constraints if isinstance(c, UniqueConstraint)),
            key=lambda c: (c.name or "", [col.name for col in c.columns]),
        )
        if indexes or uniques:
            out += ["", "| index | columns | unique |", "| --- | --- | --- |"]
            for u in uniques:
                cols = ", ".join(c.name for c in u.columns)
                out.append(f"| `{u.name or '-'}` | {cols} | yes |")
            for index in indexes:
                cols = ", ".join(getattr(e, "name", None) or str(e) for e in index.expressions)
                where = [v for k, v in index.dialect_kwargs.items() if k.endswith("_where")]
                partial = f" (where `{_cell(str(where[0]))}`)" if where else ""
                unique = "yes" if index.unique else "no"
                out.append(f"| `{index.name}` | {_cell(cols)}{partial} | {unique} |")
        out.append("")
    return out


SAMPLE = ROOT / "examples" / "sample_app"
SAMPLE_APP = "shop.jobs:registry"


def outbox_in_sample(*args: str) -> str:
    """``outbox ARGS`` run in the example app's folder, in a process of its own (its
    ``shop`` package must not meet another test's in this one), no OUTBOX_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    done = subprocess.run(
        [sys.executable, "-m", "outbox", *args],
        cwd=SAMPLE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _schemas() -> list[str]:
    """Each typed job of the example app: the command and what it prints."""
    out: list[str] = []
    for job in outbox_in_sample("schema", "--app", SAMPLE_APP).split():
        command = f"outbox schema {job} --app {SAMPLE_APP}"
        printed = outbox_in_sample("schema", job, "--app", SAMPLE_APP).rstrip("\n")
        out += [f"### `{job}`", "", f"`{command}` prints:", "", "```text", printed, "```", ""]
    return out


RENDER: dict[str, Callable[[], list[str]]] = {
    "cli": _cli,
    "env": _env,
    "configs": _configs,
    "tables": _tables,
    "schemas": _schemas,
}


def render(name: str) -> str:
    return "\n".join([START.format(name=name), *RENDER[name](), END])


def pages() -> Iterator[Path]:
    yield from sorted((DOCS / "reference").glob("*.md"))


def blocks(text: str) -> list[tuple[str, str]]:
    """The generated blocks of a page: (name, the block as it is on the page)."""
    return [(m["name"], m[0]) for m in BLOCK.finditer(text)]


def write() -> None:
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: render(m["name"]), text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {page.relative_to(ROOT)}")


if __name__ == "__main__":
    write()
    sys.exit(0)
