"""SQLite: claims with ``UPDATE … RETURNING``, one writer at a time (``BEGIN IMMEDIATE``).

Connections run in autocommit (``isolation_level=None``), in WAL mode, with a busy
timeout; the functions SQLite lacks and the relay's SQL verification calls
(``outbox_sha256``, ``regexp``) are registered on each one. Lists travel as JSON text,
read back with ``json_each()``: SQLite has no arrays.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from outbox.db.adapters import described
from outbox.db.dialect import SQLITE
from outbox.db.driver import Backend, ConnectOptions
from outbox.db.shared import SharedDriver
from outbox.db.url import URL, check_sqlite_query


class SqliteDriver(SharedDriver):
    """The shared operations are SQLite's as written; one writer at a time."""

    dialect = SQLITE
    one_writer = True


def connector(url: URL, options: ConnectOptions) -> Callable[[], sqlite3.Connection]:
    check_sqlite_query(url)  # a bad URL parameter is refused now, not at the first connection
    path = url.database or ":memory:"
    timeout_ms = int(options.sqlite_busy_timeout_ms)

    def connect() -> sqlite3.Connection:
        raw = sqlite3.connect(
            path, isolation_level=None, timeout=timeout_ms / 1000, check_same_thread=False
        )
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute(f"PRAGMA busy_timeout={timeout_ms}")
        raw.create_function("outbox_sha256", 1, _sha256, deterministic=True)
        raw.create_function("regexp", 2, _regexp, deterministic=True)
        return raw

    return connect


def begin(raw: Any) -> None:
    """``BEGIN IMMEDIATE``: the writer lock up front, so a busy database shows at BEGIN,
    where retrying is safe."""
    raw.execute("BEGIN IMMEDIATE")


def commit(raw: Any) -> None:
    raw.execute("COMMIT")


def rollback(raw: Any) -> None:
    raw.execute("ROLLBACK")


def adapt(params: Mapping[str, Any]) -> Mapping[str, Any]:
    if not any(isinstance(v, (list, tuple)) for v in params.values()):
        return params
    return {
        k: orjson.dumps(v).decode() if isinstance(v, (list, tuple)) else v
        for k, v in params.items()
    }


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _regexp(pattern: str | None, value: str | None) -> bool | None:
    """SQLite's ``x REGEXP y`` calls ``regexp(y, x)``; it ships no implementation."""
    if pattern is None or value is None:
        return None
    return _compiled(pattern).search(value) is not None


# A lone statement still takes BEGIN IMMEDIATE: one that reads before it writes can fail
# to upgrade its lock with a BUSY that no busy timeout resolves.
BACKEND = Backend(
    SQLITE, connector, begin, commit, rollback, described, SqliteDriver,
    adapt=adapt, atomic_in_transaction=True,
)
