"""How the relay waits between polls: on LISTEN wake-ups (PostgreSQL) or the clock.

A waiter never decides *whether* to look, only *how soon*: it returns early on a
wake-up and otherwise at the timeout, and the relay polls either way
(``outbox.db.listen`` says why).
"""

from __future__ import annotations

import threading
from typing import Protocol

from outbox.db.connection import Database
from outbox.db.driver import RELAY_CHANNEL
from outbox.db.listen import Listener

# How long one wait may last before ``stop`` is looked at again.
WAIT_SLICE_S = 0.25


class Waiter(Protocol):
    """How the relay waits between polls; ``close`` releases what the waiter holds."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; return early (True) on a wake-up or once ``stop`` is set."""
        ...

    def close(self) -> None: ...


class PollWaiter:
    """Poll-only: the clock (and ``stop``) are the only wake-ups."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        return stop.wait(timeout)

    def close(self) -> None:
        pass


class ListenWaiter:
    """Wakes on ``record()``'s NOTIFY through a ``Listener`` thread."""

    def __init__(self, database: Database, reconnect_max: float) -> None:
        self._woken = threading.Event()
        self._listener = Listener(
            database, RELAY_CHANNEL, self._woken.set, owner="relay", reconnect_max=reconnect_max
        )

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        left = timeout
        while not stop.is_set():
            if self._woken.wait(min(WAIT_SLICE_S, left)):
                self._woken.clear()
                return True
            left -= WAIT_SLICE_S
            if left <= 0:
                return False
        return True

    def close(self) -> None:
        self._listener.close()
