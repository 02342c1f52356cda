"""The site's pages and the README, read as a test reads them: sections and code blocks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[A-Za-z0-9_-]*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: the page it is on (relative to the root), its language,
    the first line of its body (how the registry in ``test_code_blocks`` names it) and
    the body itself, dedented by the fence's indent."""

    page: str
    lang: str
    body: str

    @property
    def first(self) -> str:
        return next((ln.strip() for ln in self.body.splitlines() if ln.strip()), "")


def site_pages() -> list[Path]:
    """Every page the site builds (``docs/incoming/`` is excluded from the build)."""
    return [p for p in sorted(DOCS.rglob("*.md")) if "incoming" not in p.relative_to(DOCS).parts]


def text(page: str) -> str:
    """A page by its path under ``docs/`` (``how-to/record.md``), or ``README.md``."""
    path = README if page == "README.md" else DOCS / page
    return path.read_text(encoding="utf-8")


def blocks_of(page: str, source: str | None = None) -> list[Block]:
    lines = (text(page) if source is None else source).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, body = len(m["indent"]), []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        found.append(Block(page, m["lang"], "\n".join(body) + "\n"))
        i += 1
    return found


def section(page: str, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of that level or higher."""
    lines = text(page).splitlines(keepends=True)
    start = lines.index(f"## {heading}\n")
    out, fenced = [lines[start]], False
    for line in lines[start + 1 :]:
        if FENCE.match(line.rstrip("\n")) or (fenced and line.strip() == "```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,2} ", line):
            break
        out.append(line)
    return "".join(out)


def code(page: str, lang: str = "python", heading: str | None = None) -> list[str]:
    """The bodies of a page's (or one section's) blocks in ``lang``."""
    source = section(page, heading) if heading else None
    return [b.body for b in blocks_of(page, source) if b.lang == lang]
