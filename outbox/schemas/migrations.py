"""Numbered migrations, the same numbers in every dialect, and the runner.

Migration 1 renders the tables of ``outbox.schemas.tables`` (the single source of
truth). A later change to the tables adds migration N with the DDL that turns N-1 into
N, and freezes what migration 1 creates by rendering it from a copy of today's tables.

Atomicity per dialect:

- PostgreSQL and SQLite have transactional DDL: each migration's DDL and its row in
  ``outbox_schema_version`` commit together, under an advisory transaction lock
  (PostgreSQL) or the writer lock taken by ``BEGIN IMMEDIATE`` (SQLite).
- MariaDB commits DDL implicitly. A session lock (``GET_LOCK``) serialises migrators,
  every statement is ``IF NOT EXISTS``, and the version row is written last, so a
  migration cut short is simply completed by the next run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import create_mock_engine
from sqlalchemy.engine.interfaces import Dialect as SADialect

from outbox.db.connection import Connection, translate
from outbox.db.dialect import Dialect
from outbox.errors import DatabaseError, OutboxError
from outbox.schemas.tables import metadata

_SA_URLS = {
    "sqlite": "sqlite://",
    "postgresql": "postgresql+psycopg://",
    "mysql": "mysql+pymysql://",
}
_CREATE = re.compile(r"^CREATE (TABLE|INDEX|UNIQUE INDEX) (?!IF NOT EXISTS)")


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered step; ``ddl`` renders its statements for a dialect."""

    version: int
    description: str
    ddl: Callable[[Dialect], list[str]]


def _render_tables(dialect: Dialect) -> list[str]:
    """CREATE statements for every table and index, as ``dialect`` spells them."""
    out: list[str] = []
    sa_dialect: list[SADialect] = []

    def capture(sql: object, *_: object, **__: object) -> None:
        out.append(str(sql.compile(dialect=sa_dialect[0])).strip())  # type: ignore[attr-defined]

    engine = create_mock_engine(_SA_URLS[dialect.name], capture)
    sa_dialect.append(engine.dialect)
    metadata.create_all(engine, checkfirst=False)
    return [_CREATE.sub(r"CREATE \1 IF NOT EXISTS ", stmt) for stmt in out]


MIGRATIONS: tuple[Migration, ...] = (Migration(1, "initial tables", _render_tables),)
LATEST = MIGRATIONS[-1].version


def render_sql(dialect: Dialect) -> str:
    """The whole schema as a script a DBA can apply, version rows included."""
    lines = [f"-- outbox schema, version {LATEST}, for {dialect.name}"]
    for m in MIGRATIONS:
        lines.append(f"\n-- migration {m.version}: {m.description}")
        if dialect.transactional_ddl:
            lines.append("BEGIN;")
        lines.extend(f"{stmt};" for stmt in m.ddl(dialect))
        lines.append(
            "INSERT INTO outbox_schema_version (version, description, applied_at) "
            f"VALUES ({m.version}, '{m.description}', {dialect.now_ms});"
        )
        if dialect.transactional_ddl:
            lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def applied_versions(conn: Connection) -> list[int]:
    """Versions recorded in the database (empty for a database never migrated)."""
    if not conn.execute("migrate_has_version_table")[0][0]:
        return []
    return [int(row[0]) for row in conn.execute("migrate_versions")]


def migrate(conn: Connection) -> list[int]:
    """Bring the schema to ``LATEST``; return the versions applied by this call.

    Idempotent, and safe when several processes run it at once.
    """
    if conn.dialect.transactional_ddl:
        return conn.transact(_migrate_in_transaction, operation="migrate")
    return _migrate_with_session_lock(conn)


def _migrate_in_transaction(conn: Connection) -> list[int]:
    conn.execute("migrate_lock")
    return _apply_missing(conn)


def _migrate_with_session_lock(conn: Connection) -> list[int]:
    """Without transactional DDL there is no ``transact`` to translate driver errors."""
    try:
        return _migrate_holding_lock(conn)
    except OutboxError:
        raise
    except Exception as exc:
        raise translate(exc, "migrate") from exc


def _migrate_holding_lock(conn: Connection) -> list[int]:
    got = conn.execute("migrate_lock")
    if not got or got[0][0] != 1:
        raise DatabaseError("migrate failed: another migration held the lock for 120 s")
    try:
        return _apply_missing(conn)
    finally:
        conn.execute("migrate_unlock")


def _apply_missing(conn: Connection) -> list[int]:
    """Apply, in order, every migration the database has not recorded; the caller holds
    the migration lock."""
    done = set(applied_versions(conn))
    missing = [m for m in MIGRATIONS if m.version not in done]
    for m in missing:
        _apply(conn, m)
    return [m.version for m in missing]


def _apply(conn: Connection, m: Migration) -> None:
    for stmt in m.ddl(conn.dialect):
        conn.execute_sql(stmt)
    conn.execute("migrate_record_version", {"version": m.version, "description": m.description})
