"""The outbox tables in a Django project: created and upgraded by outbox's own
migrations (``outbox.db.migrate``), on our own connection to the alias's database, with
their locking. ``OutboxMigrations`` is the Django migration operation that runs them;
under ``sqlmigrate`` it shows their SQL. ``unusable`` says, in Django's words (run
``manage.py migrate``, never ``outbox migrate``), why the tables cannot be used yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.migrations.operations.base import Operation

from outbox.db.dialect import dialect_named
from outbox.db.migrate import MIGRATIONS, REQUIRED, applied_versions, migrate, record_version_sql

MIGRATE = "run `manage.py migrate`"


def upgrade(alias: str) -> list[int]:
    """Apply the outbox migrations the alias's database lacks; return their versions."""
    from outbox.contrib.django import conf

    with conf.database(alias).connect() as conn:
        return migrate(conn)


def unusable(alias: str) -> str | None:
    """Why outbox cannot use the tables of ``alias``'s database yet (no SQLite file, no
    tables, a schema older than this outbox needs), naming ``manage.py migrate``; None
    when it can, and when the database cannot be read (whoever asked then says why, or
    waits for it). Never creates a SQLite file: it only looks."""
    from outbox.contrib.django import conf
    from outbox.errors import OutboxError

    try:
        database = conf.database(alias)
    except conf.SettingError:  # said by manage.py check, and where the setting is read
        return None
    if database.dialect.file_backed and not Path(database.url.database or "").is_file():
        return f"database {alias!r} has no SQLite file yet; {MIGRATE}"
    try:
        with database.connect() as conn:
            versions = applied_versions(conn)
    except OutboxError:
        return None
    if not versions:
        return f"the outbox tables of database {alias!r} are missing; {MIGRATE}"
    if max(versions) < REQUIRED:
        return (
            f"the outbox tables of database {alias!r} are behind (schema version "
            f"{max(versions)}, this outbox needs {REQUIRED}); {MIGRATE}"
        )
    return None


def in_memory(wrapper: Any) -> bool:
    """SQLite in memory, as Django's test runner makes it: no other connection can
    reach it, so outbox's migrations run on Django's own."""
    if wrapper.vendor != "sqlite":
        return False
    return bool(wrapper.is_in_memory_db())


def upgrade_in_memory(wrapper: Any) -> list[int]:
    """``upgrade`` on Django's own connection to an in-memory SQLite database (outside
    any transaction: the migration that calls it is not atomic)."""
    from outbox.db.connection import Connection
    from outbox.db.dialect import SQLITE
    from outbox.db.migrate import apply_locked

    wrapper.ensure_connection()
    return apply_locked(Connection(wrapper.connection, SQLITE))


class OutboxMigrations(Operation):
    """Runs outbox's migrations (all its schema versions, as they ship)."""

    reduces_to_sql = True  # sqlmigrate shows the statements (database_forwards)
    reversible = False

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no Django models: the tables are outbox's own

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        alias = schema_editor.connection.alias
        if getattr(schema_editor, "collect_sql", False):  # sqlmigrate: show the SQL
            dialect = dialect_named(
                {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql"}[
                    schema_editor.connection.vendor
                ]
            )
            record = record_version_sql(dialect)
            for m in MIGRATIONS:
                for stmt in m.ddl(dialect):
                    schema_editor.collected_sql.append(f"{stmt};")
                row = record.replace(":version", str(m.version))
                schema_editor.collected_sql.append(
                    row.replace(":description", f"'{m.description}'") + ";"
                )
            return
        from outbox.contrib.django import conf

        if alias != conf.alias():
            return
        if in_memory(schema_editor.connection):
            upgrade_in_memory(schema_editor.connection)
        else:
            upgrade(alias)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        raise NotImplementedError("outbox migrations only go forward")

    def describe(self) -> str:
        return "Create and upgrade the outbox tables (outbox's own migrations)"
