"""Process-wide settings read from the environment, with their defaults.

``OUTBOX_NOTIFY`` (default ``1``): on PostgreSQL, ``record()`` and ``push()`` send a
payload-less NOTIFY in the caller's transaction so a watching relay or worker wakes at
once. Set ``0`` to turn it off (e.g. behind PgBouncer in transaction pooling, or where
the commit-time lock NOTIFY takes matters more than wake-up latency); relays and
workers poll either way.

``OUTBOX_POOLER`` (default ``none``): ``transaction`` when our own PostgreSQL connections
(relay, worker, CLI) go through a pooler in transaction mode, such as PgBouncer's
``pool_mode = transaction``. A server connection then serves a client for one transaction
only, so nothing may outlive a transaction on it: psycopg prepares no statement
(``prepare_threshold=None``; a prepared statement lives in the session) and relays and
workers never LISTEN (a notification goes to whichever client holds the connection);
they poll. ``session`` (PgBouncer's ``pool_mode = session``: a server connection is the
client's for its whole session) behaves as ``none``.

``OUTBOX_QUEUE_STORAGE`` (default ``ring``): on PostgreSQL, ``ring`` makes ``migrate``
build ``outbox_jobs`` as the rotated ring of partitions that a long transaction cannot
slow down, converting a heap ``outbox_jobs`` in place, rows and all (ADR 5,
docs/explanation/adr/0005-queue-ring-storage.md); once converted, a database stays a
ring whatever this says. ``heap`` keeps (or makes) the plain table. SQLite and MariaDB
keep the heap whatever this says.

Each is read when first used, not at import, so a bad value never breaks
``import outbox``: it is a one-line ``ConfigurationError`` naming the variable and the
accepted values where it is used; the CLI checks them all (``check``) before a command
runs, and exits 2.
"""

from __future__ import annotations

import os

from outbox.errors import ConfigurationError

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
POOLER_MODES = ("none", "session", "transaction")
QUEUE_STORAGES = ("heap", "ring")


def flag(name: str, default: bool) -> bool:
    """The boolean environment variable ``name``: 1/true/yes/on or 0/false/no/off
    (any case; unset or empty is ``default``), else a ``ConfigurationError``."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _ON or value in _OFF:
        return value in _ON
    raise ConfigurationError(
        f"{name} must be one of {', '.join(_ON)} or {', '.join(_OFF)}, not {value!r}"
    )


def _pooler_from_env() -> bool:
    value = os.environ.get("OUTBOX_POOLER", "none").strip().lower() or "none"
    if value not in POOLER_MODES:
        raise ConfigurationError(
            f"OUTBOX_POOLER must be one of {', '.join(POOLER_MODES)}, not {value!r}"
        )
    return value == "transaction"


def _queue_storage_from_env() -> str:
    value = os.environ.get("OUTBOX_QUEUE_STORAGE", "ring").strip().lower() or "ring"
    if value not in QUEUE_STORAGES:
        raise ConfigurationError(
            f"OUTBOX_QUEUE_STORAGE must be one of {', '.join(QUEUE_STORAGES)}, not {value!r}"
        )
    return value


class Settings:
    """The settings in force: from the environment when first read, or ``configure``."""

    __slots__ = ("_notify", "_pooler", "_queue_storage")

    def __init__(self) -> None:
        self._notify: bool | None = None
        self._pooler: bool | None = None
        self._queue_storage: str | None = None

    @property
    def notify(self) -> bool:
        if self._notify is None:
            self._notify = flag("OUTBOX_NOTIFY", True)
        return self._notify

    @notify.setter
    def notify(self, value: bool) -> None:
        self._notify = value

    @property
    def pooler(self) -> bool:
        if self._pooler is None:
            self._pooler = _pooler_from_env()
        return self._pooler

    @pooler.setter
    def pooler(self, value: bool) -> None:
        self._pooler = value


    @property
    def queue_storage(self) -> str:
        if self._queue_storage is None:
            self._queue_storage = _queue_storage_from_env()
        return self._queue_storage

    @queue_storage.setter
    def queue_storage(self, value: str) -> None:
        self._queue_storage = value


settings = Settings()


def check() -> None:
    """Read every setting now, so a bad value is refused before anything runs (the
    encryption keyring too: ``outbox.job.sealing``)."""
    from outbox.job import sealing  # it reads its own variables; config stays below it

    _ = settings.notify, settings.pooler, settings.queue_storage
    sealing.check()


def configure(*, notify: bool | None = None, pooler: bool | None = None) -> None:
    """Change settings for this process (tests and applications that prefer code to env)."""
    if notify is not None:
        settings.notify = notify
    if pooler is not None:
        settings.pooler = pooler
