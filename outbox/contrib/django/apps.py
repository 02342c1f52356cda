"""The ``outbox.contrib.django`` app: its checks, and the outbox schema kept current by
every ``manage.py migrate`` (``post_migrate``: an outbox upgrade needs no new Django
migration file)."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class OutboxConfig(AppConfig):
    name = "outbox.contrib.django"
    label = "outbox"
    verbose_name = "outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from outbox.contrib.django.checks import configuration, schema

        checks.register(configuration)
        checks.register(schema, checks.Tags.database)
        post_migrate.connect(_upgrade, sender=self)


def _upgrade(sender: Any, using: str, plan: Any = None, **kwargs: Any) -> None:
    """After ``migrate`` on the outbox's database, bring its schema to the latest
    version (idempotent: nothing when it is current)."""
    from django.db import connections

    from outbox.contrib.django import conf
    from outbox.contrib.django.schema import in_memory, upgrade, upgrade_in_memory

    if using != conf.alias():
        return
    if in_memory(connections[using]):
        upgrade_in_memory(connections[using])
    else:
        upgrade(using)
