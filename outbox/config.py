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
they poll. Checked at import: any other value is a ``ConfigurationError``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from outbox.errors import ConfigurationError

_OFF = ("0", "false", "no", "off")
POOLER_MODES = ("none", "transaction")


def _pooler_from_env() -> bool:
    value = os.environ.get("OUTBOX_POOLER", "none").strip().lower() or "none"
    if value not in POOLER_MODES:
        raise ConfigurationError(
            f"OUTBOX_POOLER must be one of {', '.join(POOLER_MODES)}, not {value!r}"
        )
    return value == "transaction"


@dataclass(slots=True)
class Settings:
    """The settings in force; the defaults come from the environment at import."""

    notify: bool = os.environ.get("OUTBOX_NOTIFY", "1").strip().lower() not in _OFF
    pooler: bool = _pooler_from_env()


settings = Settings()


def configure(*, notify: bool | None = None, pooler: bool | None = None) -> None:
    """Change settings for this process (tests and applications that prefer code to env)."""
    if notify is not None:
        settings.notify = notify
    if pooler is not None:
        settings.pooler = pooler
