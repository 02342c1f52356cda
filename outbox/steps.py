"""Write protocols shared by the sync and async entry points, free of I/O.

Each function here is a generator: it yields ``(statement name, params)`` and receives
the rows. ``drive`` and ``drive_async`` run it on a connection. One copy of the logic
serves ``record`` and ``record_async``, ``push`` and its async twin.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from outbox.db.adapters import AsyncTarget, Target
from outbox.db.errors import is_retryable
from outbox.db.sql import queries
from outbox.errors import DatabaseError, OutboxError, RetryTransaction

Row = tuple[Any, ...]
T = TypeVar("T")
Step = tuple[str, Mapping[str, Any]]
Steps = Generator[Step, list[Row], str]


def drive(steps: Generator[Step, list[Row], T], target: Target, operation: str) -> T:
    """Run ``steps`` on a sync connection."""
    sql = queries(target.dialect)
    try:
        name, params = next(steps)
        while True:
            with _translated(operation):
                rows = target.run(sql[name], params)
            name, params = steps.send(rows)
    except StopIteration as done:
        value: T = done.value
        return value


async def drive_async(
    steps: Generator[Step, list[Row], T], target: AsyncTarget, operation: str
) -> T:
    """Run ``steps`` on an async connection."""
    sql = queries(target.dialect)
    try:
        name, params = next(steps)
        while True:
            with _translated(operation):
                rows = await target.run(sql[name], params)
            name, params = steps.send(rows)
    except StopIteration as done:
        value: T = done.value
        return value


@contextmanager
def _translated(operation: str) -> Iterator[None]:
    """Driver errors become ours (the driver's stays as ``__cause__``); ours pass through."""
    try:
        yield
    except OutboxError:
        raise
    except Exception as exc:
        raise _translate(exc, operation) from exc


def _translate(exc: Exception, operation: str) -> OutboxError:
    """A deadlock, serialisation failure or busy database dooms the caller's transaction.

    Not every such error has rolled it back already (SQLite BUSY and a MariaDB lock wait
    timeout undo only the statement), so the message asks for the rollback explicitly.
    """
    if is_retryable(exc):
        return RetryTransaction(
            f"{operation}: the database refused the write ({type(exc).__name__}); "
            "roll the transaction back and run all of it again"
        )
    from outbox.db.connection import translate

    err: DatabaseError = translate(exc, operation)
    return err
