"""The ``OUTBOX`` setting, and the outbox database URL of a Django database alias.

Django's ``DATABASES`` entry is the one configuration: the URL our own connections
(worker, relay, commands, migrations, result reads) use is made from it, so the two can
never point at different databases.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL

from outbox.db.connection import Database

if TYPE_CHECKING:
    from outbox.queue.registry import Registry

DEFAULTS: dict[str, Any] = {"DATABASE": "default", "REGISTRY": None, "ADMIN_SHOW_PAYLOADS": False}
ENGINES = {
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.mysql": "mysql",
}
# OPTIONS of Django's own, not the driver's: never part of the URL.
_DJANGO_ONLY = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory"}
)


class SettingError(ValueError):
    """The ``OUTBOX`` setting, or the database it names, cannot be used."""


class InMemory(SettingError):
    """SQLite in memory (as Django's test runner makes it): only Django's own connection
    reaches it, so no worker, relay or outbox command can."""


def setting() -> dict[str, Any]:
    """``settings.OUTBOX`` over the defaults; an unknown key is refused by name."""
    from django.conf import settings

    given = getattr(settings, "OUTBOX", {}) or {}
    if not isinstance(given, dict):
        raise SettingError("settings.OUTBOX must be a dict")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise SettingError(
            f"settings.OUTBOX has unknown keys {unknown}; known: {sorted(DEFAULTS)}"
        )
    return {**DEFAULTS, **given}


def alias() -> str:
    name = setting()["DATABASE"]
    if not isinstance(name, str):
        raise SettingError("settings.OUTBOX['DATABASE'] must be a database alias (a string)")
    return name


def url_for(alias_name: str) -> str:
    """The outbox URL of Django's database ``alias_name`` (password included: pass it
    to ``Database``, never print it)."""
    from django.db import connections

    if alias_name not in connections.settings:
        raise SettingError(f"settings.OUTBOX['DATABASE'] is {alias_name!r}: no such database")
    conf = connections.settings[alias_name]
    kind = ENGINES.get(conf.get("ENGINE", ""))
    if kind is None:
        raise SettingError(
            f"database {alias_name!r} uses {conf.get('ENGINE')!r}; outbox supports "
            + ", ".join(sorted(ENGINES))
        )
    name = str(conf.get("NAME") or "")
    if kind == "sqlite":
        if not name or name == ":memory:" or name.startswith("file:"):
            raise InMemory(
                f"database {alias_name!r} is SQLite in memory; outbox's worker, relay and "
                "commands need a file"
            )
        return URL.create("sqlite", database=name).render_as_string(hide_password=False)
    query = {
        k: str(v)
        for k, v in (conf.get("OPTIONS") or {}).items()
        if k not in _DJANGO_ONLY and isinstance(v, (str, int)) and not isinstance(v, bool)
    }
    return URL.create(
        kind,
        username=conf.get("USER") or None,
        password=conf.get("PASSWORD") or None,
        host=conf.get("HOST") or ("127.0.0.1" if kind == "mysql" else None),
        port=int(conf["PORT"]) if conf.get("PORT") else None,
        database=name or None,
        query=query,
    ).render_as_string(hide_password=False)


def registry() -> Registry | None:
    """The application's ``OUTBOX['REGISTRY']`` (None when unset). One that does not load
    is a ``SettingError`` naming the setting and why (``outbox.queue.loading``'s words),
    for ``manage.py check`` and ``manage.py outbox worker`` alike."""
    from outbox.errors import ConfigurationError
    from outbox.queue.loading import load_registry

    spec = setting()["REGISTRY"]
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise SettingError("settings.OUTBOX['REGISTRY'] must be 'MODULE:ATTR' (a string)")
    try:
        return load_registry(spec)
    except ConfigurationError as exc:
        raise SettingError(f"settings.OUTBOX['REGISTRY'] is {spec!r}: {exc}") from None


@cache
def _database(url: str) -> Database:
    return Database(url)


def database(alias_name: str | None = None) -> Database:
    """Our ``Database`` for a Django alias (default: ``OUTBOX['DATABASE']``)."""
    return _database(url_for(alias_name or alias()))
