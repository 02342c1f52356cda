"""When a long-running service (worker, relay, listener) tries its database again.

A connection the server ended — a failover, an operator's ``pg_terminate_backend`` or
``KILL``, a reset socket (``outbox.db.errors.is_connection_lost`` decides) — is usually
replaced at once by a fresh one, so the first reconnect after losing a connection that
worked happens without a pause: waiting would only stretch the outage the server caused.
Every other failure, and a reconnect that fails, pauses, doubling from ``low`` up to
``high``, so that a server that is down or refusing is not hammered.

A pause of 0 is granted once per working connection: the service says ``working()``
when a (new) connection has done its first piece of work, so a server that accepts
connections and drops every one at once still sees the backoff.
"""

from __future__ import annotations

from outbox.db.errors import is_connection_lost


class Reconnect:
    """The pause before the next try after a failure: 0 once for a lost working
    connection, else ``low`` doubling up to ``high`` until ``working()`` again (the
    settings are checked where they are given: ``RelayConfig``, ``WorkerConfig``)."""

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = min(low, high), high  # a relay's poll may exceed its cap
        self._next = self.low
        self._working = False  # the current connection has done work since it opened

    def pause(self, exc: BaseException) -> float:
        """Seconds to wait before trying again after ``exc``."""
        if self._working and is_connection_lost(exc):
            self._working = False
            return 0.0
        self._working = False
        value, self._next = self._next, min(self._next * 2, self.high)
        return value

    def working(self) -> None:
        """The connection works (again): the backoff starts over from ``low``."""
        self._working = True
        self._next = self.low
