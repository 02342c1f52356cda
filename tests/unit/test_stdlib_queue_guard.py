"""``queue`` must stay the standard library's module (ours is only ``outbox.queue``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_queue_is_the_standard_library_module() -> None:
    # A fresh interpreter started from the project root, as a user's script would be.
    code = "import queue, sys; print(queue.__file__); print(hasattr(queue, 'SimpleQueue'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(out[0]).resolve().parent == stdlib
    assert out[1] == "True"


def test_no_top_level_queue_module_or_package_in_the_project() -> None:
    assert not (ROOT / "queue.py").exists() and not (ROOT / "queue").exists()
    spec = importlib.util.find_spec("outbox.queue")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).parent.parent == ROOT / "outbox"


def test_ruff_checks_for_stdlib_module_shadowing() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    selected = lint.get("select", []) + lint.get("extend-select", [])
    assert "A" in selected or "A005" in selected
    assert not {"A", "A005"} & set(lint.get("ignore", []))


def test_ruff_with_the_project_config_flags_a_top_level_queue_module(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "queue.py").write_text("x = 1\n")
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run(
        [str(ruff), "check", "--no-cache", "queue.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "A005" in out.stdout
