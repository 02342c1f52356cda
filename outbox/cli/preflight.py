"""What the CLI checks before a command touches the database.

- A SQLite path that does not exist is an error naming it: read-only commands never
  create a database file, and a mistyped path is not silently a new, empty database.
- A database without the outbox tables (or with an older schema) is not a transient
  fault: a worker or ``relay --watch`` would otherwise retry it forever. It is said once,
  naming ``outbox migrate``, and the command exits 1.
- A database that is down *is* transient: a long-running command waits for it, with
  backoff, logging each failed attempt by error class and code (the MariaDB errno, or
  what libpq said, as a SQLSTATE; never the message, which can quote the URL), until it
  answers or SIGTERM/SIGINT arrives. Only what a restart fixes is waited for: nothing
  listening (connection refused, an unresolvable or unreachable host), a server starting
  up, shutting down or out of connection slots. A server that answered "no" (a wrong
  password, an unknown role or database, a pg_hba rule) is a configuration error: said
  once, as ``outbox status`` says it, and exit 1.
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from outbox.db.connection import Connection, Database
from outbox.db.dialect import SQLITE
from outbox.db.migrate import LATEST, REQUIRED, applied_versions
from outbox.errors import ConfigurationError, DatabaseError
from outbox.log import get_logger

# libpq reports a refusal at connect without a SQLSTATE, as "FATAL:  <message>": these are
# the server's answers that a wait cures, by the SQLSTATE the server logs with them.
_PG_WAIT = {
    "the database system is starting up": "57P03",
    "the database system is shutting down": "57P03",
    "the database system is in recovery mode": "57P03",
    "the database system is not yet accepting connections": "57P03",
    "sorry, too many clients already": "53300",
    "remaining connection slots are reserved": "53300",
}
# libpq's words for a failure with no server answer, as the errno behind them.
_PG_ERRNO = {
    "Connection refused": "ECONNREFUSED",
    "timeout expired": "ETIMEDOUT",
    "No route to host": "EHOSTUNREACH",
    "failed to resolve host": "EAI_NONAME",
    "could not translate host name": "EAI_NONAME",
}
# MariaDB/MySQL client errnos with no server answer behind them (can't connect via socket
# or TCP, unknown host, server gone, lost connection) and the server's "too many
# connections" / "shutdown in progress".
_MYSQL_WAIT = frozenset({2002, 2003, 2005, 2006, 2013, 1040, 1053})

log = get_logger("outbox.cli")

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


def check_sqlite_folder(database: Database) -> None:
    """The commands that create a SQLite file (``migrate``, ``demo``) need its folder:
    SQLite's own "unable to open database file" names neither the file nor the folder."""
    if database.dialect is not SQLITE:
        return
    name = database.url.database or ""
    if name in ("", ":memory:") or name.startswith("file:"):
        return
    folder = Path(name).resolve().parent
    if not folder.is_dir():
        raise ConfigurationError(
            f"no folder {str(folder)!r} for the SQLite database {database.describe()}; "
            "create it first"
        )


def check_schema(conn: Connection, database: Database) -> None:
    """The outbox tables must be there, at a version this code knows how to use; a newer
    one (a rolling deploy, newer code migrated first) is used, and logged once."""
    versions = conn.read(applied_versions, operation="check the outbox schema")
    if not versions:
        raise ConfigurationError(
            f"{database.describe()} has no outbox tables; run `outbox migrate` first"
        )
    if max(versions) < REQUIRED:  # the contract step alone may be missing: it only removes
        raise ConfigurationError(
            f"{database.describe()} has outbox schema version {max(versions)}, this outbox "
            f"needs {REQUIRED}; run `outbox migrate`"
        )
    if max(versions) > LATEST:  # a rolling deploy: newer code migrated first; it is said
        log.warning("schema.newer", database_version=max(versions), code_version=LATEST)


def ready(database: Database, *, wait: bool = False, stop: threading.Event | None = None) -> None:
    """Check the file and the schema; with ``wait``, wait out a database that is down."""
    check_sqlite_file(database)
    pause = FIRST_PAUSE_S
    while True:
        try:
            conn = database.connect()
        except DatabaseError as exc:
            waits, code = connect_failure(exc)
            if not wait or not waits:
                raise
            cause = type(exc.__cause__).__name__ if exc.__cause__ else type(exc).__name__
            log.error("database.unavailable", error=cause, code=code, retry_in_s=pause)
            if stop is not None and stop.wait(pause):
                raise Stopped from None
            if stop is None:
                threading.Event().wait(pause)
            pause = min(pause * 2, MAX_PAUSE_S)
            continue
        with conn:
            check_schema(conn, database)
        return


def connect_failure(exc: DatabaseError) -> tuple[bool, str | int | None]:
    """Whether waiting can cure this failed connect, and its code (SQLSTATE or errno).

    A server that is not there is waited for; one that answered and refused is not.
    """
    cause = exc.__cause__
    if cause is None:
        return False, None
    module = type(cause).__module__
    if module.startswith("pymysql"):
        errno = cause.args[0] if cause.args and isinstance(cause.args[0], int) else None
        return errno in _MYSQL_WAIT, errno
    if module.startswith("psycopg"):
        said = str(cause)
        if "FATAL:" not in said:  # libpq got no answer: refused, timed out, no such host
            return True, next((e for m, e in _PG_ERRNO.items() if m in said), None)
        answer = said.split("FATAL:", 1)[1].strip()
        for start, sqlstate in _PG_WAIT.items():
            if answer.startswith(start):
                return True, sqlstate
        return False, None
    return False, None


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM/SIGINT while the block runs; the old handlers after.

    The handler never calls ``stop.set()`` itself: a handler runs in the main thread,
    between two bytecodes of whatever it was doing, and ``set()`` takes the event's lock,
    which the main thread holds for a moment inside each ``stop.wait()``; landing there,
    the handler waited for itself for ever (a relay deaf to SIGTERM). It puts the signal
    on a ``SimpleQueue``, whose ``put`` is reentrant, and a thread sets the event.
    """
    stop = threading.Event()
    signals: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def handler(signum: int, frame: FrameType | None) -> None:
        signals.put(signum)

    def relay_signals() -> None:
        while signals.get() is not None:
            stop.set()

    setter = threading.Thread(target=relay_signals, name="outbox-stop-signals", daemon=True)
    setter.start()
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        signals.put(None)
        setter.join()
