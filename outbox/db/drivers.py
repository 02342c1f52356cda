"""The one factory that picks a dialect's ``Backend`` (and so its ``Driver``): by URL
scheme for a new ``Database``, by dialect for a connection handed in. A fourth dialect
is one new module and one more entry here."""

from __future__ import annotations

from outbox.db import mysql, postgresql, sqlite
from outbox.db.dialect import Dialect
from outbox.db.driver import Backend
from outbox.errors import ConfigurationError

# URL scheme (before any ``+driver``) → backend.
SCHEMES: dict[str, Backend] = {
    "sqlite": sqlite.BACKEND,
    "postgresql": postgresql.BACKEND,
    "postgres": postgresql.BACKEND,
    "mysql": mysql.BACKEND,
    "mariadb": mysql.BACKEND,
}
ACCEPTED_SCHEMES = tuple(SCHEMES)
_BY_DIALECT = {b.dialect.name: b for b in SCHEMES.values()}


def backend_for(scheme: str) -> Backend:
    """The backend of a URL scheme; an unknown one is a ``ConfigurationError`` listing
    the accepted schemes."""
    try:
        return SCHEMES[scheme.split("+", 1)[0]]
    except KeyError:
        raise ConfigurationError(
            f"unsupported database URL scheme {scheme.split('+', 1)[0]!r}; "
            f"accepted: {', '.join(ACCEPTED_SCHEMES)}"
        ) from None


def backend_of(dialect: Dialect) -> Backend:
    return _BY_DIALECT[dialect.name]
