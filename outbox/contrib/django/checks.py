"""``manage.py check``: what would stop outbox from working, found before it is used.

Always: ``outbox.E001`` the ``OUTBOX`` setting is wrong; ``E002`` its database alias
does not exist; ``E003`` that database's engine is not one outbox supports; ``W002`` it
is SQLite in memory (fine for Django's test runner, which makes one; no worker can reach
it); ``E004`` ``OUTBOX['REGISTRY']`` does not load (the worker would refuse to
start). With ``check --database ALIAS``: ``W001`` the outbox tables are missing or behind
(run ``manage.py migrate``): a warning, so that ``migrate``, which runs the database
checks first, is never blocked by the very thing it fixes; ``--fail-level WARNING``
makes it fail a deployment check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core import checks

from outbox.contrib.django import conf


def configuration(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E001-E003: the setting and the database it names (no connection made)."""
    return list(_problems())


def schema(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """W001, a database check: Django runs it with ``check --database ALIAS`` (and
    before ``migrate``'s own checks), as it does every check that connects."""
    if list(_problems()) or not databases:
        return []
    alias = conf.alias()
    if alias not in databases:
        return []
    return list(_schema(alias))


def _problems() -> Iterator[checks.CheckMessage]:
    try:
        alias = conf.alias()
    except conf.SettingError as exc:
        yield checks.Error(str(exc), id="outbox.E001")
        return
    yield from _database(alias)
    try:
        conf.registry()
    except conf.SettingError as exc:
        yield checks.Error(
            str(exc), hint="set OUTBOX['REGISTRY'] to 'module:attr' of an outbox.Registry",
            id="outbox.E004",
        )


def _database(alias: str) -> Iterator[checks.CheckMessage]:
    from django.db import connections

    if alias not in connections.settings:
        yield checks.Error(
            f"settings.OUTBOX['DATABASE'] is {alias!r}, which is not in DATABASES",
            hint="set OUTBOX = {'DATABASE': '<an alias of DATABASES>'}",
            id="outbox.E002",
        )
        return
    try:
        conf.url_for(alias)
    except conf.InMemory as exc:  # Django's test databases: run_tasks() still works
        yield checks.Warning(str(exc), id="outbox.W002")
    except conf.SettingError as exc:
        yield checks.Error(str(exc), id="outbox.E003")


def _schema(alias: str) -> Iterator[checks.CheckMessage]:
    from outbox.db.migrate import LATEST, applied_versions
    from outbox.errors import OutboxError

    try:
        with conf.database(alias).connect() as conn:
            done = set(applied_versions(conn))
    except OutboxError as exc:
        yield checks.Warning(
            f"cannot read the outbox schema of {alias!r}: {exc}", id="outbox.W001"
        )
        return
    missing = sorted(set(range(1, LATEST + 1)) - done)
    if missing:
        yield checks.Warning(
            f"the outbox tables of database {alias!r} are "
            + ("missing" if not done else f"behind (versions {missing} not applied)"),
            hint="run manage.py migrate",
            id="outbox.W001",
        )


def backend_checks(backend: Any) -> Iterator[checks.CheckMessage]:
    """The task backend's own: its database must pass the checks above."""
    yield from _problems()
