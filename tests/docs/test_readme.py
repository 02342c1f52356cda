"""The README as a front door: short, its two commands the ones CI runs, its example a
jobs module apart from the script that records."""

from __future__ import annotations

import ast
import re
import tomllib

from tests.docs.pages import README, ROOT, blocks_of, text

INSTALL_AND_DEMO = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/outbox demo"
)
TESTS = "./scripts/test.sh"


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    assert len(text("README.md").splitlines()) <= 250


def test_its_first_two_commands_install_and_demo_then_run_the_whole_suite_as_ci_does() -> None:
    first, second = blocks_of("README.md")[:2]
    assert (first.lang, first.body.strip()) == ("bash", INSTALL_AND_DEMO)
    assert (second.lang, second.body.strip()) == ("bash", TESTS)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^step tests \./scripts/test\.sh$", ci, re.M)
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "pip install -q --disable-pip-version-check -e '.[dev]'" in script
    assert "python -m pytest" in script


def test_every_link_of_the_readme_reaches_a_file() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text("README.md"))
    local = [link for link in links if "://" not in link]
    assert len(local) >= 20  # the links into the site were read
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def test_the_worker_imports_a_jobs_module_that_only_declares() -> None:
    """``--app shop_jobs:registry`` names the block saved as ``shop_jobs.py``, which
    declares the registry and its handlers and does nothing else at import; the script
    that records is another file. (``tests/docs/test_code_blocks.py`` runs the blocks.)"""
    apps = set(re.findall(r"--app (\w+):registry", text("README.md")))
    assert apps == {"shop_jobs"}
    (jobs,) = [b for b in blocks_of("README.md") if b.first == "# shop_jobs.py"]
    statements = ast.parse(jobs.body).body
    assert all(isinstance(s, (ast.ImportFrom, ast.Import, ast.FunctionDef)) for s in
               statements[:1] + statements[2:]), jobs.body
    assert ast.unparse(statements[1]) == "registry = Registry()"
    assert [b.first for b in blocks_of("README.md") if b.lang == "python"][:2] == [
        "# shop_jobs.py", "# shop.py"]


def test_the_readme_names_the_distribution_pyproject_builds() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    assert f"**`{name}`**" in README.read_text(encoding="utf-8")
