"""The version-1 package, exported once per session from the repository's history."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

V1_COMMIT = "ee0df54"  # the last release of schema version 1
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def v1_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder holding version 1's ``outbox`` package (for ``PYTHONPATH``).

    Taken with ``git archive`` from this repository: a clone has the history. A checkout
    without it cannot run the upgrade tests, and says so instead of passing quietly.
    """
    found = subprocess.run(
        ["git", "-C", str(ROOT), "archive", V1_COMMIT, "outbox"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"the upgrade tests need commit {V1_COMMIT} (a full clone): "
            + found.stderr.decode(errors="replace").strip()
        )
    folder = tmp_path_factory.mktemp("outbox_v1")
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(folder, filter="data")
    yield folder
