"""The three SQL dialects and what each can do.

Code asks a capability (``supports_skip_locked``) rather than testing a dialect's name,
so a fourth dialect means one new entry here, not a hunt through the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DialectName = Literal["sqlite", "postgresql", "mysql"]


@dataclass(frozen=True, slots=True)
class Dialect:
    """One SQL dialect's name and capabilities (ask these, not the name)."""

    name: DialectName
    supports_skip_locked: bool
    supports_listen: bool
    supports_returning: bool
    # INSERT inside a WITH clause: a key row and its intent in one statement.
    supports_insert_cte: bool
    transactional_ddl: bool
    # The driver's parameter style: "named" (:name) or "pyformat" (%(name)s).
    paramstyle: Literal["named", "pyformat"]
    # The database's clock as integer UNIX milliseconds: every stored time comes from it.
    # Named SQL writes it as {now_ms}.
    now_ms: str


SQLITE = Dialect(
    "sqlite",
    False,
    False,
    True,
    False,
    True,
    "named",
    "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
)
POSTGRESQL = Dialect(
    "postgresql",
    True,
    True,
    True,
    True,
    True,
    "pyformat",
    "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
)
MYSQL = Dialect(
    "mysql",
    True,
    False,
    False,
    False,
    False,
    "pyformat",
    "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (SQLITE, POSTGRESQL, MYSQL)}


def dialect_named(name: str) -> Dialect:
    """The dialect for a SQLAlchemy-style name (``mariadb`` is ``mysql``)."""
    key = "mysql" if name == "mariadb" else name
    try:
        return DIALECTS[key]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; expected one of {sorted(DIALECTS)}") from None
