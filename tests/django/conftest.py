"""Django in the test process: configured once from ``tests.django.settings``; each test
gets its own database (the shared fixtures' ``database``) as a Django alias of its own."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
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
    alias = f"t{next(_aliases)}"
    configured = connections.configure_settings(
        {"default": connections.settings["default"], alias: database_settings(db_url)}
    )
    connections.settings[alias] = configured[alias]
    yield alias
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]
