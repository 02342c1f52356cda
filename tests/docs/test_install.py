"""The install lines of the README and the site: the one that works today, as printed.

No release of the distribution is on the package index yet, so every page that names
``pip install 'outbox-relay[EXTRA]'`` (what works once released) names today's install
from a checkout beside it, with the same extras: ``pip install -e '.[EXTRA]'`` (the
README, read in the checkout) or ``pip install -e '../outbox[EXTRA]'`` (the site, which
the tutorial's first step explains). The tutorial's install (``tutorial.md``'s first
block, read as ``test_tutorial`` reads it) runs here as printed, in a fresh folder whose
``../outbox`` is this checkout, into a fresh venv (slow, 26 s on a loaded 2-core box:
pip builds the editable wheel and fetches the dependencies, through its cache).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT, site_pages, text
from tests.docs.test_tutorial import _steps

RELEASED = re.compile(r"pip\s+install\s+'outbox-relay\[([a-z,]+)\]'")


def _pages() -> list[str]:
    site = [str(p.relative_to(DOCS)) for p in site_pages() if p.name != "changelog.md"]
    return ["README.md", *site]


def test_every_released_install_has_todays_install_beside_it() -> None:
    named = 0
    for page in _pages():
        flat = " ".join(text(page).split())
        for extras in RELEASED.findall(flat):
            named += 1
            today = ("." if page == "README.md" else "../outbox") + f"[{extras}]"
            assert f"pip install -e '{today}'" in flat, f"{page}: no `pip install -e '{today}'`"
    assert named >= 6  # README, index, tutorial, alembic, django, jetstream, metrics, tracing


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_tutorials_install_works_in_a_fresh_venv(tmp_path: Path) -> None:
    lines, _ = _steps()
    install, activate = lines[:2]
    assert "../outbox[" in install and activate == "source .venv/bin/activate"
    (tmp_path / "outbox").symlink_to(ROOT)  # the checkout, where the page clones it
    folder = tmp_path / "work"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OUTBOX_", "VIRTUAL_ENV", "PYTHON"))}
    script = "\n".join([install, activate,
                        "outbox --help >/dev/null",
                        "python -c 'import outbox, psycopg; print(outbox.__file__)'"])
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    imported = Path(done.stdout.strip().splitlines()[-1]).resolve()
    assert imported == ROOT / "outbox" / "__init__.py"  # the checkout, editable
