"""outbox for Django: the app ``outbox.contrib.django`` and the ``django.tasks`` backend.

Add ``"outbox.contrib.django"`` to ``INSTALLED_APPS`` (``manage.py migrate`` then
creates and upgrades the outbox tables, ``manage.py check`` checks the configuration,
``manage.py outbox <command>`` runs any outbox command on the configured database, the
admin lists dead letters, quarantined intents and results), and set
``TASKS = {"default": {"BACKEND": "outbox.contrib.django.TaskBackend"}}``.

The optional ``OUTBOX`` setting: ``{"DATABASE": "default"}`` (the alias the tables
live in and tasks are written to), ``"REGISTRY": "module:attr"`` (plain outbox handlers
the same worker runs) and ``"ADMIN_SHOW_PAYLOADS": False``.

Names are imported lazily: importing this package needs no configured Django.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TaskBackend", "idempotent", "ordered", "run_tasks"]


def __getattr__(name: str) -> Any:
    if name in ("TaskBackend", "idempotent", "ordered"):
        from outbox.contrib.django import backend

        return getattr(backend, name)
    if name == "run_tasks":
        from outbox.contrib.django.testing import run_tasks

        return run_tasks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
