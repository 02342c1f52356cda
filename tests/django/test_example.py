"""examples/django_app: its own Django test suite (``manage.py test shop``) passes on
every backend, in a real process, with a test database Django builds itself."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from sqlalchemy.engine import make_url

from tests.fixtures.workers import ROOT

EXAMPLE = ROOT / "examples" / "django_app"


def test_the_example_s_tests_pass(backend: str, db_url: str) -> None:
    url = make_url(db_url).set(query={})  # Django's test database gets its own schema
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "DJANGO_"))}
    env["DATABASE_URL"] = url.render_as_string(hide_password=False)
    if backend != "sqlite":  # SQLite: Django's own test database, in memory
        env["TEST_DATABASE_NAME"] = f"outbox_example_{secrets.token_hex(4)}"
    done = subprocess.run(
        [sys.executable, "manage.py", "test", "shop", "--noinput", "-v", "1"],
        cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Ran 2 tests" in done.stderr and "OK" in done.stderr
