"""What the CLI checks before a command touches the database.

- A SQLite path that does not exist is an error naming it: read-only commands never
  create a database file, and a mistyped path is not silently a new, empty database.
- A database without the outbox tables (or with an older schema) is not a transient
  fault: a worker or ``relay --watch`` would otherwise retry it forever. It is said once,
  naming ``outbox migrate``, and the command exits 1.
- A database that is down *is* transient: a long-running command waits for it, with
  backoff, logging each failed attempt by error class (never its message, which can
  quote the URL), until it answers or SIGTERM/SIGINT arrives.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import structlog

from outbox.db.connection import Connection, Database
from outbox.db.dialect import SQLITE
from outbox.db.migrate import LATEST, applied_versions
from outbox.errors import ConfigurationError, DatabaseError

log = structlog.get_logger("outbox.cli")

FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 5.0


class Stopped(Exception):
    """SIGTERM/SIGINT arrived while waiting for the database."""


def check_sqlite_file(database: Database) -> None:
    """A SQLite URL must name an existing file (``sqlite://`` in memory aside)."""
    if database.dialect is not SQLITE:
        return
    name = database.url.database or ""
    if name in ("", ":memory:") or name.startswith("file:"):
        return
    path = Path(name)
    if not path.is_file():
        raise ConfigurationError(
            f"no SQLite database at {str(path.resolve())!r} (from the database URL "
            f"{database.describe()}); check the path, or create it with `outbox migrate`"
        )


def check_schema(conn: Connection, database: Database) -> None:
    """The outbox tables must be there, at a version this code knows how to use."""
    versions = conn.read(applied_versions, operation="check the outbox schema")
    if not versions:
        raise ConfigurationError(
            f"{database.describe()} has no outbox tables; run `outbox migrate` first"
        )
    if max(versions) < LATEST:
        raise ConfigurationError(
            f"{database.describe()} has outbox schema version {max(versions)}, this outbox "
            f"needs {LATEST}; run `outbox migrate`"
        )


def ready(database: Database, *, wait: bool = False, stop: threading.Event | None = None) -> None:
    """Check the file and the schema; with ``wait``, wait out a database that is down."""
    check_sqlite_file(database)
    pause = FIRST_PAUSE_S
    while True:
        try:
            conn = database.connect()
        except DatabaseError as exc:
            if not wait:
                raise
            cause = type(exc.__cause__).__name__ if exc.__cause__ else type(exc).__name__
            log.error("database.unavailable", error=cause, retry_in_s=pause)
            if stop is not None and stop.wait(pause):
                raise Stopped from None
            if stop is None:
                threading.Event().wait(pause)
            pause = min(pause * 2, MAX_PAUSE_S)
            continue
        with conn:
            check_schema(conn, database)
        return


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM/SIGINT while the block runs; the old handlers after."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
