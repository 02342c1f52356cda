"""The README as a front door: short, its two commands the ones CI runs, its example run."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

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


def test_the_example_records_relays_and_runs_one_job(tmp_path: Path) -> None:
    example = next(b for b in blocks_of("README.md") if b.lang == "python")
    migrate = "outbox --database-url sqlite:///shop.db migrate"
    assert example.first.startswith(f"# shop.py: run `{migrate}`")
    assert len(example.body.splitlines()) <= 32
    (tmp_path / "shop.py").write_text(example.body, encoding="utf-8")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "OUTBOX_LOG_FORMAT": "json"}
    env.pop("OUTBOX_DATABASE_URL", None)
    for argv in (
        [str(bin_dir / "outbox"), "--database-url", "sqlite:///shop.db", "migrate"],
        [sys.executable, "shop.py"],
        [sys.executable, "shop.py"],  # the key deduplicates: nothing runs twice
    ):
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    db = sqlite3.connect(tmp_path / "shop.db")
    try:
        counts = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("users", "outbox_keys", "outbox_messages", "outbox_jobs",
                            "outbox_failed_jobs")]
    finally:
        db.close()
    assert counts == [1, 1, 0, 0, 0]  # recorded once, handed off, run and acknowledged


def test_the_readme_names_the_distribution_pyproject_builds() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    assert f"**`{name}`**" in README.read_text(encoding="utf-8")
