"""The README's command reference, rendered from ``--help`` itself.

``python -m tests.acceptance.cli_reference`` rewrites the block between the markers in
README.md; ``test_cli_rules.py`` fails when the README and ``--help`` differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from outbox.cli import main
from outbox.cli.conventions import walk

README = Path(__file__).resolve().parents[2] / "README.md"
START = "<!-- cli-reference: generated from --help by python -m tests.acceptance.cli_reference -->"
END = "<!-- cli-reference: end -->"


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="outbox")
    assert result.exit_code == 0, result.output
    return result.output.rstrip() + "\n"


def render() -> str:
    """Every command's ``--help``, in command order, as one Markdown block."""
    parts = [START, "<details><summary>Every command's <code>--help</code></summary>", ""]
    for path, _ in walk(main):
        parts += [f"`{' '.join(('outbox', *path))} --help`", "", "```text", help_text(path)]
        parts[-1] = parts[-1].rstrip("\n")
        parts += ["```", ""]
    parts += ["</details>", END]
    return "\n".join(parts)


def current() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index(START) : text.index(END) + len(END)]


def write() -> None:
    text = README.read_text(encoding="utf-8")
    README.write_text(text.replace(current(), render()), encoding="utf-8")


if __name__ == "__main__":
    write()
    sys.exit(0)
