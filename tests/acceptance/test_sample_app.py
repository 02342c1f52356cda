"""The sample application's own pytest suite (examples/sample_app), run as a user runs
it: its pytest, its ini, outbox's plugin found through the installed entry point,
SQLAlchemy sessions with rollback per test — on every backend."""

from __future__ import annotations

import os
import subprocess
import sys

from outbox.db.connection import Database
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.workers import ROOT

SAMPLE = ROOT / "examples" / "sample_app"


def _pytest(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "PYTEST_"))}
    full_env.update(SHOP_DATABASE_URL=sqlalchemy_url(db_url), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=SAMPLE,
        env=full_env,
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )


def test_the_sample_apps_suite_passes(db_url: str) -> None:
    done = _pytest(db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed, 1 skipped" in done.stdout
    with Database(db_url).connect() as conn:
        rows = conn.execute_sql("SELECT count(*) FROM outbox_messages")
    assert rows[0][0] == 0  # rollback per test: nothing the suite did was committed


def test_outbox_eager_turns_eager_mode_on_for_the_whole_suite(db_url: str) -> None:
    done = _pytest(db_url, "-k", "with_outbox_eager", OUTBOX_EAGER="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_fixtures_come_from_the_installed_plugin(db_url: str) -> None:
    done = _pytest(db_url, "-p", "no:outbox", "-k", "welcome_email_is_written")
    assert done.returncode != 0  # without it, its ini setting is unknown and its fixtures gone
    assert "Unknown config option: outbox_registry" in done.stdout + done.stderr
