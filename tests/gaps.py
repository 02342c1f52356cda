"""The registry of reasoned gaps: the one place a test may take a reason to skip.

Where backends legitimately differ, a test asserts each dialect's behaviour; it skips
only where the behaviour under test cannot exist on a backend (no LISTEN on SQLite, no
server session to drop from a file) or the run was not set up for it (soak mode, a
backend not selected). Each such gap is named here once, with why it exists, so the
suite's gaps read as one list and a skip summary line (``SQLITE_FILE: ...``) leads back
to it. ``tests/unit/test_gaps.py`` fails on any skip that bypasses these helpers.
"""

from __future__ import annotations

from enum import Enum, unique
from typing import NoReturn

import pytest

from outbox.db.dialect import DialectName


@unique
class Gap(Enum):
    """A reason a test does not run somewhere; the value says why the backend differs."""

    LISTEN_NOTIFY = "LISTEN/NOTIFY exists only on PostgreSQL: elsewhere relays and workers poll"
    SQLITE_FILE = "SQLite is a file, not a server: there is no session or connection to drop"
    SQLITE_ONE_WRITER = (
        "SQLite admits one writer at a time (BEGIN IMMEDIATE): transactions can neither"
        " deadlock nor commit out of their start order"
    )
    SQLITE_BUSY = "SQLITE_BUSY is SQLite's lock wait; servers queue on row locks and deadlock"
    SQLITE_JOURNAL = "PRAGMA journal_mode (WAL) is SQLite's; a server's log is not ours to set"
    SQLITE3_CONNECTION = "a sqlite3.Connection connects to SQLite only"
    PSYCOPG_CONNECTION = "psycopg connections (and pg_stat_activity) belong to PostgreSQL"
    PYMYSQL_CONNECTION = "PyMySQL connects to MariaDB/MySQL only"
    TRUSTED_LOGIN = (
        "only the PostgreSQL test server trusts loopback logins: there a URL with any password"
        " connects, so every command runs with one"
    )
    NO_ASYNC_MYSQL_DRIVER = "no async MariaDB driver (aiomysql, asyncmy) is part of the project"
    MYSQL_IMMEDIATE_CONSTRAINTS = (
        "MariaDB checks constraints per statement (no DEFERRABLE): its COMMIT cannot fail on one"
    )
    PRESENTATION_ONLY = "terminal presentation, not storage: one backend (SQLite) is enough"
    POSTGRESQL_NOT_SELECTED = "postgresql is not in OUTBOX_TEST_BACKENDS for this run"
    NO_POSTGRESQL_BINARIES = "no PostgreSQL 15 server binaries here to start a private cluster"
    SOAK_ONLY = "a long soak run: only with OUTBOX_SOAK=1"
    NO_READ_ONLY_FILE = (
        "running as root without chattr: no file can be made read-only for this process"
    )

    @property
    def reason(self) -> str:
        """The skip message: the entry's name first, so it can be found here."""
        return f"{self.name}: {self.value}"


def skip_gap(gap: Gap) -> NoReturn:
    """Skip the running test (or fixture) for a registered reason."""
    __tracebackhide__ = True  # the skip summary names the caller's line, not this one
    pytest.skip(gap.reason)


def skip_unless(backend: str, *supported: DialectName, gap: Gap) -> None:
    """Skip unless ``backend`` is one of ``supported``, for a registered reason."""
    __tracebackhide__ = True
    if backend not in supported:
        skip_gap(gap)


def skip_mark(condition: bool, gap: Gap) -> pytest.MarkDecorator:
    """A ``skipif`` marker for a condition known at collection time (a flag, not a backend)."""
    return pytest.mark.skipif(condition, reason=gap.reason)
