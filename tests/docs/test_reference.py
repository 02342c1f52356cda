"""The reference pages against the code: regenerated and compared, so they cannot drift."""

from __future__ import annotations

import ast
import re

import pytest

from outbox.cli import main
from outbox.cli.conventions import walk
from tests.docs import reference

PAGES = {p.name: p.read_text(encoding="utf-8") for p in reference.pages()}
GENERATED = [(page, name, block) for page, text in PAGES.items() for name, block in
             reference.blocks(text)]
LEAVES = [" ".join(path) for path, command in walk(main) if not hasattr(command, "commands")]


def test_every_generator_has_its_block_on_a_page() -> None:
    assert sorted(name for _, name, _ in GENERATED) == sorted(reference.RENDER)


@pytest.mark.parametrize(("page", "name", "block"), GENERATED, ids=[n for _, n, _ in GENERATED])
def test_the_generated_block_matches_the_code(page: str, name: str, block: str) -> None:
    assert block == reference.render(name), (
        f"docs/reference/{page}: the {name} block is stale; run python -m tests.docs.reference"
    )


def test_the_cli_page_has_every_commands_help() -> None:
    for path, _ in walk(main):
        assert f"### `{' '.join(('outbox', *path))}`" in PAGES["cli.md"]


def test_the_exit_code_table_lists_every_command() -> None:
    text = PAGES["exit-codes.md"]
    table = text[text.index("| command | 0 | 1 | 2 | 3 |") :].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `outbox ([a-z -]+)` \|", table, flags=re.M)
    assert sorted(listed) == sorted(LEAVES)


def _environment_names() -> set[str]:
    """Every whole ``OUTBOX_*`` name the package's source spells out as a string."""
    names: set[str] = set()
    for path in sorted(reference.ROOT.joinpath("outbox").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"OUTBOX_[A-Z_]*[A-Z]", value):
                names.add(value)
    return names


def test_every_environment_variable_the_code_reads_is_on_the_settings_page() -> None:
    names = _environment_names()
    assert {"OUTBOX_POOLER", "OUTBOX_NOTIFY", "OUTBOX_DATABASE_URL"} <= names  # it looked
    documented = set(re.findall(r"`(OUTBOX_[A-Z_]+)`", PAGES["settings.md"]))
    assert names - documented == set()


def _options_under(name: str) -> set[str]:
    """Every long option of the top-level command ``name`` and the commands under it."""
    return {
        opt
        for path, command in walk(main)
        if path[:1] == (name,)
        for param in command.params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--")
    }


def test_the_hand_written_command_table_names_real_commands_and_options() -> None:
    rows = re.findall(r"^\| `outbox ([a-z]+)[^\n]*$", PAGES["cli.md"], re.M)
    assert len(rows) >= 14
    top = {path[0] for path, _ in walk(main) if path}
    for row in re.findall(r"^\| `outbox [a-z][^\n]*$", PAGES["cli.md"], re.M):
        name = row.split()[2].strip("`")
        assert name in top, row
        for option in re.findall(r"(--[a-z][a-z-]*)", row):
            assert option in _options_under(name) | {"--help"}, (name, option)
