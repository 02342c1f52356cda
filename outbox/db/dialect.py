"""The three SQL dialects and what each can do.

Code asks a capability (``supports_skip_locked``) rather than testing a dialect's name,
so a fourth dialect means one new entry here, not a hunt through the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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
    # The database is a file the URL names (SQLite): a missing one is a mistyped path.
    file_backed: bool = False


SQLITE = Dialect(
    "sqlite",
    False,
    False,
    True,
    False,
    True,
    "named",
    "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    file_backed=True,
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

# MariaDB 10.5+ returns rows from an INSERT, ON DUPLICATE KEY UPDATE included (the
# existing row's values): a caller's connection to it runs MySQL's SQL with that one
# capability more (``on_server``). Not in DIALECTS: same name, same SQL files.
MARIADB = replace(MYSQL, supports_returning=True)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (SQLITE, POSTGRESQL, MYSQL)}
_MARIADB_VERSION = re.compile(r"(\d+)\.(\d+)\.\d+-MariaDB")


def on_server(dialect: Dialect, version: str) -> Dialect:
    """``dialect`` as the server behind a connection refines it: ``MARIADB`` for
    ``MYSQL`` on MariaDB 10.5 or later (the version string as the protocol sends it,
    perhaps behind a ``5.5.5-`` prefix); otherwise ``dialect`` itself."""
    found = _MARIADB_VERSION.search(version) if dialect == MYSQL else None
    if found and (int(found.group(1)), int(found.group(2))) >= (10, 5):
        return MARIADB
    return dialect


def dialect_named(name: str) -> Dialect:
    """The dialect for a SQLAlchemy-style name (``mariadb`` is ``mysql``)."""
    key = "mysql" if name == "mariadb" else name
    try:
        return DIALECTS[key]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; expected one of {sorted(DIALECTS)}") from None
