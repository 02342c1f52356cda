"""Our tables in an Alembic history: an operations helper for your revisions.

For teams whose schema is Alembic's. Alembic's convention is that every schema change is
a revision file in your history; ours are too, one revision per outbox schema version,
each calling ``upgrade`` with the version it brings the database to::

    # migrations/versions/20261130_outbox_v1.py (ops/alembic/ has the whole example)
    from alembic import op
    import outbox.alembic

    revision = "20261130_outbox_v1"
    down_revision = "..."                     # your previous revision

    def upgrade() -> None:
        outbox.alembic.upgrade(op, to=1)

    def downgrade() -> None:
        outbox.alembic.downgrade(op)          # drops the outbox tables and their rows

``upgrade`` runs the same numbered migrations as ``outbox migrate``, on Alembic's
connection and inside its transaction, and records each in ``outbox_schema_version``:
the two paths make the same schema and can take turns (``outbox migrate`` after Alembic
finds the database up to date, and the reverse). ``alembic upgrade head --sql`` (offline)
prints the DDL. In ``env.py``, pass ``include_object`` to ``context.configure`` so
``alembic revision --autogenerate`` leaves our tables alone: they are not in your
``target_metadata``, and without it autogenerate proposes to drop them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, text

from outbox.db.connection import Connection
from outbox.db.dialect import Dialect, dialect_named
from outbox.db.migrate import (
    CONTRACT,
    LATEST,
    MIGRATIONS,
    Migration,
    apply_locked,
    held_back,
    record_version_sql,
    storage_teardown,
    version_of,
)
from outbox.errors import ConfigurationError
from outbox.log import get_logger
from outbox.schemas.tables import metadata as _metadata

metadata: MetaData = _metadata
"""Our tables, for reading (reflection, your own queries). Not for your
``target_metadata``: ``upgrade`` owns these tables' DDL."""

TABLES = frozenset(_metadata.tables)


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """``context.configure(include_object=...)``: autogenerate ignores our tables and their
    indexes. Chain it with a filter of your own by calling it from yours."""
    if type_ == "table":
        return name not in TABLES
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in TABLES


def upgrade(op: Any, *, to: int = LATEST) -> list[int]:
    """Apply outbox migrations up to version ``to`` that the database lacks; return them.

    ``op`` is ``alembic.op``. Pin ``to`` in each revision (``to=1`` in the first), so
    the revision means the same thing after you upgrade outbox. As with ``outbox
    migrate``, the contract step is held back (and a warning logged) while code of
    schema version 1 evidently still writes to the database; a later ``upgrade``
    applies it. Offline (``--sql``) every step is printed: a DBA applies the contract
    step's part only once no such code runs.
    """
    wanted = _wanted(to)
    ctx = op.get_context()
    dialect = dialect_named(ctx.dialect.name)
    if ctx.as_sql:
        for m in wanted:
            _emit(op, dialect, m)
        return [m.version for m in wanted]
    conn = Connection(op.get_bind().connection.dbapi_connection, dialect)
    applied = apply_locked(conn, to)  # the lock lasts until Alembic commits (MariaDB: released)
    if to >= version_of(CONTRACT) and (why := held_back(conn)):
        get_logger("outbox.alembic").warning("contract step held back", reason=why)
    return applied


def downgrade(op: Any) -> None:
    """Drop every outbox table, rows included: the downgrade of the revision that created
    them. (Outbox's own migrations only go forward.)"""
    for table in reversed(_metadata.sorted_tables):
        op.drop_table(table.name)
    for stmt in storage_teardown(op.get_context().dialect.name):  # the ring's own, if any
        op.execute(stmt)


def _wanted(to: int) -> list[Migration]:
    if isinstance(to, bool) or not isinstance(to, int) or not 1 <= to <= LATEST:
        raise ConfigurationError(
            f"outbox.alembic.upgrade(to=...) must be a schema version from 1 to {LATEST}"
        )
    return [m for m in MIGRATIONS if m.version <= to]


def _emit(op: Any, dialect: Dialect, m: Migration) -> None:
    """Offline (``--sql``): print the migration's DDL and its version row."""
    for stmt in m.ddl(dialect):
        op.execute(stmt)
    op.execute(text(record_version_sql(dialect)).bindparams(**m.version_row))
