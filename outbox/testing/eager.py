"""Eager mode: jobs run at commit time, in the committing transaction, for quick scripts
and tests that want "record, commit, done".

Just before a SQLAlchemy ``Session`` or ``Connection`` commits, ``run_pending`` runs on
it, so the recorded jobs (and what they record in turn) run and their rows go with the
commit. Only SQLAlchemy has commit hooks; with a raw DB-API connection, call
``run_pending`` yourself. Turned on by ``eager(registry)``, the ``outbox_eager`` pytest
fixture, or ``OUTBOX_EAGER=1`` (``eager_from_env``; the plugin reads it too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from outbox.config import flag
from outbox.queue.registry import Registry
from outbox.testing.clock import Clock
from outbox.testing.run import run_pending

ENV = "OUTBOX_EAGER"
_running: ContextVar[bool] = ContextVar("outbox_eager_running", default=False)


@contextmanager
def eager(registry: Registry, *, clock: Clock | None = None) -> Iterator[None]:
    """Within the block, every SQLAlchemy commit first runs the due jobs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    def run(conn: Any) -> None:
        if _running.get():  # a commit made by a job it runs
            return
        token = _running.set(True)
        try:
            run_pending(conn, registry, clock=clock)
        finally:
            _running.reset(token)

    def on_session(session: Session) -> None:
        run(session)

    def on_connection(conn: Any) -> None:
        run(conn)

    event.listen(Session, "before_commit", on_session)
    event.listen(Engine, "commit", on_connection)
    try:
        yield
    finally:
        event.remove(Session, "before_commit", on_session)
        event.remove(Engine, "commit", on_connection)


def eager_on() -> bool:
    """``OUTBOX_EAGER``: 1/true/yes/on or 0/false/no/off; anything else is a
    ``ConfigurationError`` naming it (``banana`` no longer quietly means off)."""
    return flag(ENV, False)


def eager_from_env(registry: Registry) -> AbstractContextManager[None]:
    """``eager(registry)`` when ``OUTBOX_EAGER`` is on, else a block that changes nothing."""
    return eager(registry) if eager_on() else nullcontext()
