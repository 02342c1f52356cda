"""The Django page (docs/how-to/django.md): its first section's commands run as written,
in order, in a fresh directory, and end with the task's result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.fixtures.workers import ROOT

PAGE = ROOT / "docs" / "how-to" / "django.md"
_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _first_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## From `pip install` to a task running")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OUTBOX_", "DJANGO_")) and k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_page_goes_from_pip_install_to_a_task_result(tmp_path: Path) -> None:
    steps = _BLOCK.findall(_first_section())
    assert steps, "the section has no code blocks"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    outputs: list[str] = []
    for lang, info, body in steps:
        if lang == "python":
            how, _, path = info.strip().partition("=")
            target = tmp_path / path
            assert how in ("file", "append") and path, f"python block without a file: {info}"
            if how == "append":
                assert target.exists(), f"{path} should exist by now"
                target.write_text(target.read_text() + "\n" + body)
            else:
                target.write_text(body)
            continue
        assert lang == "console"
        for line in body.splitlines():
            assert line.startswith("$ "), line
            command = line[2:]
            if command.startswith("pip install"):  # installed here already: the extra exists
                extra = re.search(r"outbox-relay\[([a-z,]+)\]", command)
                assert extra and set(extra.group(1).split(",")) <= set(extras)
                continue
            done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_env(),
                                  capture_output=True, text=True, timeout=180, check=False)
            assert done.returncode == 0, (command, done.stderr[-3000:])
            outputs.append(done.stdout)
    assert "status:       SUCCESSFUL" in outputs[-1]
    assert 'return:       "receipt for order 42 sent"' in outputs[-1]
