"""Process-wide settings read from the environment, with their defaults.

``OUTBOX_NOTIFY`` (default ``1``): on PostgreSQL, ``record()`` and ``push()`` send a
payload-less NOTIFY in the caller's transaction so a watching relay or worker wakes at
once. Set ``0`` to turn it off (e.g. behind PgBouncer in transaction pooling, or where
the commit-time lock NOTIFY takes matters more than wake-up latency); relays and
workers poll either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_OFF = ("0", "false", "no", "off")


@dataclass(slots=True)
class Settings:
    """The settings in force; the defaults come from the environment at import."""

    notify: bool = os.environ.get("OUTBOX_NOTIFY", "1").strip().lower() not in _OFF


settings = Settings()


def configure(*, notify: bool | None = None) -> None:
    """Change settings for this process (tests and applications that prefer code to env)."""
    if notify is not None:
        settings.notify = notify
