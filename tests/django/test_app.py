"""The app: ``manage.py migrate`` deploys the outbox tables with Django's own, ``sqlmigrate``
shows their SQL, ``check`` finds what would stop outbox, and ``manage.py outbox`` runs
outbox's commands on Django's database."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.test import override_settings

from outbox.contrib.django import checks
from outbox.db.connection import Database
from outbox.db.migrate import LATEST, applied_versions
from tests.django.conftest import manage


def test_migrate_deploys_and_check_reports_the_schema(db_url: str, empty_alias: str) -> None:
    from django.core.management import call_command

    with override_settings(OUTBOX={"DATABASE": empty_alias}):
        before = checks.schema(databases=[empty_alias])
        assert [m.id for m in before] == ["outbox.W001"]
        assert f"tables of database {empty_alias!r} are missing" in before[0].msg
        shown = io.StringIO()
        call_command("sqlmigrate", "outbox", "0001", database=empty_alias, stdout=shown)
        assert "CREATE TABLE IF NOT EXISTS outbox_jobs" in shown.getvalue()
        assert "CREATE TABLE IF NOT EXISTS outbox_job_results" in shown.getvalue()
        with Database(db_url).connect() as conn:
            assert applied_versions(conn) == []  # sqlmigrate only shows
        call_command("migrate", "outbox", database=empty_alias, verbosity=0, interactive=False)
        with Database(db_url).connect() as conn:
            assert applied_versions(conn) == list(range(1, LATEST + 1))
        assert checks.schema(databases=[empty_alias]) == []
        out = io.StringIO()
        call_command("outbox", "status", stdout=out)
    bad = manage(db_url, "outbox", "result", "nope")  # a real manage.py process
    assert bad.returncode == 2 and "not a message id" in bad.stderr


A_FILE = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "app.db"}}  # not opened


@pytest.mark.parametrize(
    ("outbox", "databases", "error"),
    [
        ({"DATABASE": "nope"}, None, "outbox.E002"),
        ({"DATABASES": "default"}, None, "outbox.E001"),
        ({"REGISTRY": "shop.nope:registry"}, A_FILE, "outbox.E004"),
        ({"REGISTRY": ["shop.jobs:registry"]}, A_FILE, "outbox.E004"),
        ({"REGISTRY": "tests.fixtures.apps.scheduler:nightly"}, A_FILE, "outbox.E004"),
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


def test_the_outbox_url_is_made_from_django_s_settings() -> None:
    from django.db import connections

    from outbox.contrib.django import conf

    saved = dict(connections.settings)
    try:
        connections.settings.update(connections.configure_settings({
            "default": saved["default"],
            "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "app",
                   "PASSWORD": "s3cret", "HOST": "db", "PORT": "6432",
                   "OPTIONS": {"sslmode": "require", "isolation_level": 1, "pool": True}},
            "my": {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "root"},
        }))
        assert conf.url_for("pg") == (
            "postgresql://app:s3cret@db:6432/shop?sslmode=require")  # Django-only keys dropped
        assert conf.url_for("my") == "mysql://root@127.0.0.1/shop"
        with pytest.raises(conf.SettingError, match="'nope': no such database"):
            conf.url_for("nope")
    finally:
        connections.settings.clear()
        connections.settings.update(saved)
