"""Django in the test process: configured once from ``tests.django.settings``; each test
gets its own database (the shared fixtures' ``database``) as a Django alias of its own."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.settings")
django.setup()

from django.db import connections  # noqa: E402

from tests.django.settings import database_settings  # noqa: E402

_aliases = itertools.count()


@pytest.fixture
def django_alias(db_url: str, database: Any) -> Iterator[str]:
    """A Django alias for this test's migrated database, closed and removed after it."""
    yield from _alias_for(db_url)


@pytest.fixture
def empty_alias(db_url: str) -> Iterator[str]:
    """A Django alias for this test's database, never migrated."""
    yield from _alias_for(db_url)


def _alias_for(db_url: str) -> Iterator[str]:
    alias = f"t{next(_aliases)}"
    configured = connections.configure_settings(
        {"default": connections.settings["default"], alias: database_settings(db_url)}
    )
    connections.settings[alias] = configured[alias]
    yield alias
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]


MANAGE = Path(__file__).with_name("manage.py")


def manage(db_url: str, *args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A real ``manage.py`` process on ``db_url``'s database."""
    return subprocess.run(
        [sys.executable, str(MANAGE), *args],
        env={**os.environ, "OUTBOX_DJANGO_DB_URL": db_url, **(env or {})},
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def failure_trace(message: str) -> str:
    """What a worker keeps of a handler that raised: a chained traceback whose two
    exceptions carry ``message``."""
    try:
        try:
            raise LookupError(f"cause: {message}")
        except LookupError as exc:
            raise ValueError(message) from exc
    except ValueError as exc:
        return "".join(traceback.format_exception(exc))


@pytest.fixture
def outbox_on(django_alias: str) -> Iterator[str]:
    """``OUTBOX = {"DATABASE": <this test's alias>}`` for the test."""
    from django.test import override_settings

    with override_settings(OUTBOX={"DATABASE": django_alias}):
        yield django_alias


@pytest.fixture(scope="session")
def admin_site_ready() -> None:
    """Django's own tables (users, sessions, permissions) in the ``default`` alias,
    SQLite in memory for the whole session; the outbox tables live in each test's alias."""
    from django.core.management import call_command
    from django.test import override_settings
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client then records templates' contexts
    with override_settings(OUTBOX={"DATABASE": "none: Django's own tables only"}):
        call_command("migrate", verbosity=0, interactive=False)


@pytest.fixture
def staff(admin_site_ready: None) -> Iterator[Any]:
    """A staff user who may view the outbox models and no more (grant what a test needs)."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(f"staff{next(_aliases)}", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="outbox", codename__startswith="view")
    )
    yield user
    user.delete()
