"""The tables, per dialect, their migrations, and the named SQL in ``<dialect>/*.sql``."""

from outbox.schemas.migrations import LATEST, MIGRATIONS, applied_versions, migrate, render_sql

__all__ = ["LATEST", "MIGRATIONS", "applied_versions", "migrate", "render_sql"]
