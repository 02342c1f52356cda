"""The site's structure: what the nav holds, what it leaves out, what a newcomer reaches."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from tests.docs.pages import DOCS, ROOT, site_pages, text

CONFIG = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _nav_files(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [f for v in node.values() for f in _nav_files(v)]
    return [f for v in node for f in _nav_files(v)]


NAV = _nav_files(CONFIG["nav"])


def test_the_nav_lists_every_page_once_and_only_pages_that_exist() -> None:
    pages = sorted(str(p.relative_to(DOCS)) for p in site_pages())
    assert sorted(NAV) == pages


def test_the_build_is_strict_and_leaves_the_incoming_notes_out() -> None:
    assert CONFIG["strict"] is True
    assert "incoming/" in CONFIG["exclude_docs"].split()


def test_the_four_parts_and_the_how_to_guides_the_issue_names() -> None:
    top = [next(iter(item)) if isinstance(item, dict) else item for item in CONFIG["nav"]]
    assert {"Tutorial", "How-to guides", "Reference", "Explanation"} <= set(top)
    howto = [f for f in NAV if f.startswith("how-to/")]
    for page in ("queue-control", "periodic-jobs", "testing", "metrics", "pgbouncer",
                 "alembic", "dashboard", "jetstream", "upgrading", "deploy", "roles"):
        assert f"how-to/{page}.md" in howto


def _links(page: str) -> set[str]:
    base = page.rsplit("/", 1)[0] + "/" if "/" in page else ""
    found = set()
    for link in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text(page)):
        parts: list[str] = []
        for part in (base + link).split("/"):
            if part == "..":
                parts.pop()
            elif part != ".":
                parts.append(part)
        found.add("/".join(parts))
    return found


def test_a_newcomer_reaches_deploy_with_systemd_in_two_clicks_from_the_front_page() -> None:
    first = _links("index.md")
    second = {p for page in first if (DOCS / page).is_file() for p in _links(page)}
    assert "how-to/deploy.md" in first | second
    assert "systemd" in text("how-to/deploy.md")


def test_the_site_build_folder_is_ignored_by_git() -> None:
    """``mkdocs build`` (``mkdocs serve`` too) writes ``site/`` at the root: git ignores
    it, so a build is never committed by mistake."""
    site = CONFIG.get("site_dir", "site")
    done = subprocess.run(["git", "check-ignore", "-q", f"{site}/index.html"], cwd=ROOT,
                          check=False)
    assert done.returncode == 0, f"{site}/ is not in .gitignore"
