"""The app: ``manage.py migrate`` deploys the outbox tables with Django's own, ``sqlmigrate``
shows their SQL, ``check`` finds what would stop outbox, and ``manage.py outbox`` runs
outbox's commands on Django's database."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from outbox.contrib.django import checks
from outbox.db.connection import Database
from outbox.db.migrate import LATEST, applied_versions
from tests.django.conftest import manage


def test_migrate_deploys_and_check_reports_the_schema(db_url: str) -> None:
    before = manage(db_url, "check", "--database", "default", "--fail-level", "WARNING")
    assert before.returncode != 0 and "outbox.W001" in before.stderr
    assert "tables of database 'default' are missing" in before.stderr
    shown = manage(db_url, "sqlmigrate", "outbox", "0001")
    assert shown.returncode == 0, shown.stderr
    assert "CREATE TABLE IF NOT EXISTS outbox_jobs" in shown.stdout
    assert "CREATE TABLE IF NOT EXISTS outbox_job_results" in shown.stdout
    with Database(db_url).connect() as conn:
        assert applied_versions(conn) == []  # sqlmigrate only shows
    migrated = manage(db_url, "migrate", "outbox", "--no-input")  # Django's own apps: theirs
    assert migrated.returncode == 0, migrated.stderr
    with Database(db_url).connect() as conn:
        assert applied_versions(conn) == list(range(1, LATEST + 1))
    after = manage(db_url, "check", "--database", "default", "--fail-level", "WARNING")
    assert after.returncode == 0, after.stderr
    status = manage(db_url, "outbox", "status")
    assert status.returncode == 0, status.stderr
    bad = manage(db_url, "outbox", "result", "nope")
    assert bad.returncode == 2 and "not a message id" in bad.stderr


@pytest.mark.parametrize(
    ("outbox", "databases", "error"),
    [
        ({"DATABASE": "nope"}, None, "outbox.E002"),
        ({"DATABASES": "default"}, None, "outbox.E001"),
        ({}, {"default": {"ENGINE": "django.db.backends.oracle", "NAME": "x"}}, "outbox.E003"),
        ({}, {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
         "outbox.W002"),
    ],
)
def test_check_names_what_is_wrong(
    outbox: dict[str, Any], databases: dict[str, Any] | None, error: str
) -> None:
    from django.db import connections

    saved = dict(connections.settings)
    try:
        if databases is not None:
            connections.settings.update(connections.configure_settings(databases))
        with override_settings(OUTBOX=outbox):
            found = checks.configuration()
    finally:
        connections.settings.clear()
        connections.settings.update(saved)
    assert [m.id for m in found] == [error], found
