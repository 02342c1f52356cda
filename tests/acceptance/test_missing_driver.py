"""A database URL whose driver is not installed (the base install has neither psycopg nor
PyMySQL) is refused in one line naming the extra to install, exit 1 (issue 38: a
35-line traceback ending in ``No module named 'pymysql'``; for psycopg, that line alone).

The real CLI runs in a subprocess whose ``PYTHONPATH`` puts first a package of the
driver's name that fails to import, as a missing one does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.workers import ROOT

MISSING = 'raise ModuleNotFoundError("No module named {0!r}", name={0!r})\n'
BROKEN = 'raise ImportError("no pq wrapper available")\n'  # psycopg without a libpq


def _without(tmp_path: Path, module: str, body: str = MISSING) -> dict[str, str]:
    shadow = tmp_path / "shadow" / module
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(body.format(module))
    return {**os.environ, "PYTHONPATH": str(shadow.parent)}


def _outbox(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "outbox", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("module", "url", "args", "said"),
    [
        (
            "pymysql",
            "mysql://root@127.0.0.1:3306/app",
            ["status"],
            "error: a MariaDB/MySQL database URL needs PyMySQL, which is not installed: "
            "pip install 'outbox-relay[mysql]'",
        ),
        (
            "pymysql",
            "mariadb://root@127.0.0.1:3306/app?charset=utf8mb4",
            ["worker", "default", "--app", "tests.fixtures.apps.control:registry"],
            "error: a MariaDB/MySQL database URL needs PyMySQL, which is not installed: "
            "pip install 'outbox-relay[mysql]'",
        ),
        (
            "psycopg",
            "postgresql://app:hunter2@127.0.0.1/app",
            ["relay", "--watch"],
            "error: a PostgreSQL database URL needs psycopg 3, which is not installed: "
            "pip install 'outbox-relay[postgres]'",
        ),
    ],
)
def test_a_url_without_its_driver_says_which_extra_to_install(
    tmp_path: Path, module: str, url: str, args: list[str], said: str
) -> None:
    env = _without(tmp_path, module)
    for line in (["--database-url", url, *args], [*args, "--database-url", url]):
        run = _outbox(env, *line)
        assert (run.returncode, run.stderr, run.stdout) == (1, said + "\n", "")
    run = _outbox({**env, "OUTBOX_DATABASE_URL": url}, *args)
    assert (run.returncode, run.stderr) == (1, said + "\n")


def test_a_driver_that_cannot_be_imported_is_said_so(tmp_path: Path) -> None:
    env = _without(tmp_path, "psycopg", BROKEN)
    run = _outbox(env, "--database-url", "postgresql://127.0.0.1/app", "migrate")
    assert run.returncode == 1
    assert run.stderr == (
        "error: a PostgreSQL database URL needs psycopg 3, which cannot be imported: "
        "pip install 'outbox-relay[postgres]'\n"
    )


def test_the_library_raises_missing_extra_when_the_database_is_made(tmp_path: Path) -> None:
    code = (
        "from outbox import Database\n"
        "from outbox.errors import ConfigurationError, MissingExtra\n"
        "try:\n"
        "    Database('mysql://root@127.0.0.1/app')\n"
        "except MissingExtra as exc:\n"
        "    assert isinstance(exc, ConfigurationError)\n"
        "    print(exc.extra)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_without(tmp_path, "pymysql"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, "mysql\n", "")
