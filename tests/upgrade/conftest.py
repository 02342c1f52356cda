"""Earlier releases' packages, exported once per session from the repository's history."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.test_migrate import other_url  # noqa: F401 (a fixture, for test_contract)

V1_COMMIT = "ee0df54"  # the last release of schema version 1
V2_COMMIT = "34b8ded"  # the last release of schema version 2 (the release before this one)
ROOT = Path(__file__).resolve().parents[2]


def _exported(commit: str, folder: Path) -> Path:
    """``commit``'s ``outbox`` package in ``folder`` (for ``PYTHONPATH``).

    Taken with ``git archive`` from this repository: a clone has the history. A checkout
    without it cannot run the upgrade tests, and says so instead of passing quietly.
    """
    found = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "outbox"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"the upgrade tests need commit {commit} (a full clone): "
            + found.stderr.decode(errors="replace").strip()
        )
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


@pytest.fixture(scope="session")
def v1_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder holding version 1's ``outbox`` package."""
    yield _exported(V1_COMMIT, tmp_path_factory.mktemp("outbox_v1"))


@pytest.fixture(scope="session")
def v2_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder holding the previous release's package (schema version 2)."""
    yield _exported(V2_COMMIT, tmp_path_factory.mktemp("outbox_v2"))
