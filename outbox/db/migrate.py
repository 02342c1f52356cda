"""The migration runner: numbered migrations, the same numbers in every dialect.

The migrations themselves are data: ``outbox/schemas/<dialect>/migrations/NNNN_<what>.sql``,
statements separated by ``;`` at a line's end (a trigger or function body, between
``BEGIN`` and ``END;`` or ``$$`` quotes, is one statement). A change to the tables adds
the next file in each dialect's folder; a file once released never changes.

Atomicity per dialect:

- PostgreSQL and SQLite have transactional DDL: each migration's DDL and its row in
  ``outbox_schema_version`` commit together, under an advisory transaction lock
  (PostgreSQL) or the writer lock taken by ``BEGIN IMMEDIATE`` (SQLite).
- MariaDB commits DDL implicitly. A session lock (``GET_LOCK``) serialises migrators,
  every statement is ``IF NOT EXISTS``, and the version row is written last, so a
  migration cut short is simply completed by the next run.

The contract step (``CONTRACT``) drops what only code of schema version 1 needed, and
the guard after it (``SCHEMA_1_GUARD``) makes version-1 writes fail from then on. Both
are held back while that code evidently still runs (``schema_1_writers``): after them, a
version-1 producer could not record at all. The runner applies every other step, says
why it held those two back, and a later run, once the version-1 code is gone, applies
them. Neither is needed by this code, so holding them back never stops it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from outbox.config import settings
from outbox.db.connection import Connection
from outbox.db.dialect import DIALECTS, Dialect
from outbox.db.errors import translated
from outbox.db.sql import queries
from outbox.errors import DatabaseError

CONTRACT = "drop schema 1 compatibility"
SCHEMA_1_GUARD = "refuse schema 1 writers"
# Held back together while schema-1 code runs; this code needs neither.
HELD_BACK_STEPS = (CONTRACT, SCHEMA_1_GUARD)
# How far back a trace of version-1 code holds the contract step back: a day covers a
# producer that writes rarely (a nightly job) as well as a rolling upgrade in progress.
SCHEMA_1_WINDOW_MS = 86_400_000

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_BODY_BEGIN = re.compile(r"^\s*BEGIN\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered step; ``ddl`` gives its statements for a dialect."""

    version: int
    description: str
    ddl: Callable[[Dialect], list[str]]

    @property
    def version_row(self) -> dict[str, Any]:
        """Its row of ``outbox_schema_version``: ``record_version_sql``'s parameters."""
        return {"version": self.version, "description": self.description}


@cache
def _files(dialect_name: str) -> dict[int, tuple[str, list[str]]]:
    """Version → (description, statements) from the dialect's migration files."""
    folder = resources.files("outbox.schemas") / dialect_name / "migrations"
    out: dict[int, tuple[str, list[str]]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        match = _FILE.match(entry.name)
        if match is None:
            continue
        out[int(match.group(1))] = (
            match.group(2).replace("_", " "),
            split_statements(entry.read_text(encoding="utf-8")),
        )
    return out


def split_statements(text: str) -> list[str]:
    """A migration file's statements, comment lines dropped, in order."""
    statements: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("--") or not (current or line.strip()):
            continue
        current.append(line)
        body = "\n".join(current)
        in_dollars = body.count("$$") % 2 == 1
        in_block = (
            "$$" not in body
            and _BODY_BEGIN.search(body) is not None
            and line.strip() != "END;"
        )
        if line.rstrip().endswith(";") and not in_dollars and not in_block:
            statements.append(body.strip().removesuffix(";").rstrip())
            current = []
    if "\n".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements


def _load() -> tuple[Migration, ...]:
    """Every dialect must define the same versions with the same descriptions."""
    per_dialect = {name: _files(name) for name in DIALECTS}
    versions = {name: sorted(files) for name, files in per_dialect.items()}
    first = next(iter(versions.values()))
    if any(v != first for v in versions.values()) or first != list(range(1, len(first) + 1)):
        raise RuntimeError(f"migration files differ between dialects: {versions}")
    return tuple(Migration(v, per_dialect["sqlite"][v][0], _ddl_of(v)) for v in first)


def _ddl_of(version: int) -> Callable[[Dialect], list[str]]:
    def ddl(dialect: Dialect) -> list[str]:
        return list(_files(dialect.name)[version][1])

    return ddl


MIGRATIONS: tuple[Migration, ...] = _load()
LATEST = MIGRATIONS[-1].version
# The version this code needs to run: every step but the held-back ones, which only
# remove or refuse what older code needed (and wait while that code runs). Every other
# step is applied whatever they wait for, so a database at REQUIRED has all of them.
REQUIRED = max(m.version for m in MIGRATIONS if m.description not in HELD_BACK_STEPS)


def version_of(description: str) -> int:
    """The version of the migration named ``description`` (its file name's words).

    Code and tests name a migration by what it does, never by its number, so two
    changes written side by side can take the next free numbers when they land.
    """
    for m in MIGRATIONS:
        if m.description == description:
            return m.version
    raise KeyError(f"no migration is named {description!r}")


def record_version_sql(dialect: Dialect) -> str:
    """The statement that records a migration's version, with ``:version`` and
    ``:description`` placeholders: for scripts made without a connection (``render_sql``,
    Alembic's offline mode)."""
    return queries(dialect)["migrate_record_version"].named


def render_sql(dialect: Dialect) -> str:
    """The whole schema as a script a DBA can apply, version rows included."""
    record = record_version_sql(dialect)
    lines = [f"-- outbox schema, version {LATEST}, for {dialect.name}"]
    for m in MIGRATIONS:
        lines.append(f"\n-- migration {m.version}: {m.description}")
        if m.description == CONTRACT:
            lines.append(
                "-- The contract step: on a database code of schema version 1 wrote to,"
                "\n-- apply it only once no such code runs (`outbox migrate` checks this)."
            )
        if dialect.transactional_ddl:
            lines.append("BEGIN;")
        lines.extend(_printable(stmt, dialect) for stmt in m.ddl(dialect))
        row = record.replace(":version", str(m.version))
        lines.append(row.replace(":description", f"'{m.description}'") + ";")
        if dialect.transactional_ddl:
            lines.append("COMMIT;")
    storage = _storage_ddl(dialect.name, settings.queue_storage)
    if storage:
        name = settings.queue_storage
        lines.append(f"\n-- the queue storage: {name} (OUTBOX_QUEUE_STORAGE)\nBEGIN;")
        lines.extend(_printable(stmt, dialect) for stmt in storage)
        lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def _printable(statement: str, dialect: Dialect) -> str:
    """One statement for a script: the MariaDB client needs another delimiter around a
    trigger body, whose statements end in ``;``."""
    if dialect.transactional_ddl or not _BODY_BEGIN.search(statement):
        return f"{statement};"
    return f"DELIMITER //\n{statement}//\nDELIMITER ;"


def applied_versions(conn: Connection) -> list[int]:
    """Versions recorded in the database (empty for a database never migrated)."""
    with translated("schema version"):
        if not conn.execute("migrate_has_version_table")[0][0]:
            return []
        return [int(row[0]) for row in conn.execute("migrate_versions")]


def migrate(conn: Connection) -> list[int]:
    """Bring the schema to ``LATEST``; return the versions applied by this call.

    Idempotent, and safe when several processes run it at once.
    """
    if conn.dialect.transactional_ddl:
        return conn.transact(lambda c: apply_locked(c), operation="migrate")
    with translated("migrate"):  # no ``transact`` here to translate driver errors
        return apply_locked(conn)


def apply_locked(conn: Connection, to: int | None = None) -> list[int]:
    """Take the migration lock and apply, in order, every migration up to ``to`` (default
    all) the database has not recorded; return their versions.

    With transactional DDL the caller holds a transaction, and the lock lasts until it ends
    (``outbox migrate``'s own, or Alembic's); MariaDB's is a session lock, released here.
    """
    got = conn.execute("migrate_lock")
    if conn.dialect.transactional_ddl:
        applied = _apply_missing(conn, to)
        return applied if to is not None and to < LATEST else _with_storage(conn, applied)
    if not got or got[0][0] != 1:
        raise DatabaseError(
            "migrate failed: another migration held the lock for 120 s", operation="migrate"
        )
    try:
        return _apply_missing(conn, to)
    finally:
        conn.execute("migrate_unlock")


def _with_storage(conn: Connection, applied: list[int]) -> list[int]:
    """After the numbered migrations, the queue storage ``OUTBOX_QUEUE_STORAGE`` asks for:
    on PostgreSQL, ``ring`` (the default) builds the ring, converting a heap
    ``outbox_jobs`` in place (this transaction, under the migration lock), rows and all;
    ``heap`` leaves the table as it is; a ring stays a ring. ``outbox migrate`` and
    Alembic's ``upgrade`` both come here once at the latest version (a revision pinned to
an earlier one converts nothing), so both make the same schema."""
    storage = _storage_ddl(conn.dialect.name, settings.queue_storage)
    if storage and not conn.execute("ring_installed")[0][0]:
        for stmt in storage:
            conn.execute_sql(stmt)
    return applied


@cache
def _storage_ddl(dialect_name: str, storage: str) -> list[str]:
    """The statements of ``schemas/<dialect>/storage/<storage>.sql``; none where the
    dialect has no such file (the heap has none anywhere; only PostgreSQL has the ring:
    SQLite and MariaDB keep the heap whatever is asked), so the choice needs no branch
    on the dialect."""
    entry = resources.files("outbox.schemas") / dialect_name / "storage" / f"{storage}.sql"
    if not entry.is_file():
        return []
    return split_statements(entry.read_text(encoding="utf-8"))


def storage_teardown(dialect_name: str) -> list[str]:
    """What drops the ring storage's own objects, beside the tables (none off PostgreSQL)."""
    return _storage_ddl(dialect_name, "ring_drop")


def _apply_missing(conn: Connection, to: int | None) -> list[int]:
    """Apply the missing steps up to ``to``, skipping held-back ones while schema-1 code
    may still write."""
    done = set(applied_versions(conn))
    missing = [m for m in MIGRATIONS if m.version not in done and (to is None or m.version <= to)]
    applied: list[int] = []
    holding: bool | None = None  # asked once, when a held-back step comes up
    for m in missing:
        if m.description in HELD_BACK_STEPS:
            if holding is None:
                holding = schema_1_writers(conn) is not None
            if holding:
                continue  # ``held_back`` says why
        _apply(conn, m)
        applied.append(m.version)
    return applied


def schema_1_writers(conn: Connection) -> str | None:
    """Why code of schema version 1 may still be running, or None when nothing says so.

    The traces it leaves: intents without ``keyed`` (every later writer sets it) and
    ``published`` tombstones (a version-1 relay's, or the compatibility trigger's),
    written in the last ``SCHEMA_1_WINDOW_MS``. Only asked on a schema that has the
    ``keyed`` column (migration "intents move keys stay" and later).
    """
    row = conn.execute("migrate_schema_1_writers", {"window_ms": SCHEMA_1_WINDOW_MS})[0]
    intents, newest_intent, tombstones, newest_tombstone = row
    hours = SCHEMA_1_WINDOW_MS // 3_600_000
    if intents:
        return (
            f"{intents} intent(s) written by schema-1 code in the last {hours} h "
            f"(the newest at {int(newest_intent)} ms since the epoch) are in outbox_messages"
        )
    if tombstones:
        return (
            f"{tombstones} tombstone(s) left by a schema-1 relay or producer in the last "
            f"{hours} h (the newest at {int(newest_tombstone)} ms since the epoch) are in "
            "outbox_messages"
        )
    return None


def held_back(conn: Connection) -> str | None:
    """Why the contract step is not applied yet (a sentence for the operator), or None."""
    if version_of(CONTRACT) in applied_versions(conn):
        return None
    reason = schema_1_writers(conn)
    if reason is None:
        return None
    return (
        f"migration {version_of(CONTRACT)} ({CONTRACT}) and migration "
        f"{version_of(SCHEMA_1_GUARD)} ({SCHEMA_1_GUARD}) are held back: "
        f"{reason}. Stop every process running an outbox release of schema version 1, "
        "let the relay hand their intents off (or wait for the traces to age out), "
        "then run `outbox migrate` again"
    )


def _apply(conn: Connection, m: Migration) -> None:
    for stmt in m.ddl(conn.dialect):
        conn.execute_sql(stmt)
    conn.execute("migrate_record_version", m.version_row)
