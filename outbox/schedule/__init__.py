"""Periodic jobs: declarations (``entries``), the scheduler service and its SQL store.

``Registry.periodic`` and ``Registry.schedule`` declare; ``outbox scheduler`` runs
``service.Scheduler``, which records each due tick through ``record()``.
"""

from __future__ import annotations

from collections.abc import Iterator

from outbox.errors import ConfigurationError
from outbox.schedule.entries import Entry, declare

__all__ = ["Entry", "Schedules", "declare"]


class Schedules:
    """The periodic jobs of one registry, by name (names are unique)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def add(self, entry: Entry) -> None:
        """Declare one schedule; a name declared twice raises ``ConfigurationError``."""
        if entry.name in self._entries:
            raise ConfigurationError(f"schedule {entry.name!r} is already declared")
        self._entries[entry.name] = entry

    def get(self, name: str) -> Entry | None:
        """The schedule declared under ``name``, or ``None``."""
        return self._entries.get(name)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
