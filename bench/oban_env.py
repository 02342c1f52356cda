"""oban-py's own environment: it needs Python >= 3.12, the project supports 3.11.

``python -m bench.oban_env`` (or the first ``peers`` run) makes ``bench/.work/oban-venv``
with the first Python >= 3.12 it finds (``$BENCH_OBAN_PYTHON``, ``python3.13``,
``python3.12`` on PATH, pyenv's versions) and installs oban into it from PyPI. Where
there is none, the peers scenario runs without oban-py and says so.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

from bench.plan import OBAN_PYTHON

OBAN_REQUIREMENT = "oban~=0.7"


def _candidates() -> list[str]:
    found = [os.environ.get("BENCH_OBAN_PYTHON", "")]
    found += [shutil.which(n) or "" for n in ("python3.14", "python3.13", "python3.12")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    return [c for c in found if c]


def _is_312(python: str) -> bool:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip() == "True"


def ensure() -> str | None:
    """The oban environment's interpreter, made if needed; ``None`` when it cannot be."""
    if OBAN_PYTHON.exists():
        return str(OBAN_PYTHON)
    base = next((c for c in _candidates() if _is_312(c)), None)
    if base is None:
        return None
    venv = OBAN_PYTHON.parent.parent
    print(f"  [peers] making oban-py's environment at {venv} with {base}", flush=True)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(OBAN_PYTHON), "-m", "pip", "install", "-q", OBAN_REQUIREMENT], check=True)
    return str(OBAN_PYTHON)


if __name__ == "__main__":
    made = ensure()
    print(made or "no Python >= 3.12 found: oban-py cannot run here", file=sys.stderr)
    raise SystemExit(0 if made else 1)
