"""SQLite: claims with ``UPDATE … RETURNING``, one writer at a time (``BEGIN IMMEDIATE``)."""

from __future__ import annotations

from outbox.db.dialect import SQLITE
from outbox.db.driver import Driver


class SqliteDriver(Driver):
    """The shared operations are SQLite's as written; nothing to override."""

    dialect = SQLITE
