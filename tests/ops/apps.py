"""The job handlers the ops tests run: plain, failing, slow and transactional ones.

``ledger.credit`` is transactional: it writes a row into the application's own
``ops_ledger`` table in the job's transaction, so its effect and its acknowledgement
commit together (the grants test gives the worker's user INSERT on that table, as an
operator would).
"""

from __future__ import annotations

import time
from typing import Any

from outbox import PermanentFailure, Registry, Snooze
from outbox.queue import Backoff, JobContext

registry = Registry()
FAST = Backoff(base=0.02, cap=0.05)
LEDGER_DDL = "CREATE TABLE ops_ledger (message_id VARCHAR(36) PRIMARY KEY, amount INTEGER)"


@registry.job("ops.noop")
def noop(payload: Any, ctx: JobContext) -> None:
    pass


@registry.job("ops.limited", concurrency=1, rate="1000/s")
def limited(payload: Any, ctx: JobContext) -> None:
    """Passes the global limits' gate: the worker role writes the limit tables."""


@registry.job("ops.permanent")
def permanent(payload: Any, ctx: JobContext) -> None:
    raise PermanentFailure("never works")


@registry.job("ops.fail", backoff=FAST)
def fail(payload: Any, ctx: JobContext) -> None:
    raise RuntimeError("fails every time")


SNOOZED: set[str] = set()


@registry.job("ops.snooze_once")
def snooze_once(payload: Any, ctx: JobContext) -> None:
    """Comes back once through Snooze (the worker's UPDATE of snoozes), then succeeds."""
    if ctx.message_id not in SNOOZED:
        SNOOZED.add(ctx.message_id)
        raise Snooze(0)


@registry.job("ops.slow")
def slow(payload: Any, ctx: JobContext) -> None:
    time.sleep(float(payload["s"]))


@registry.job("ledger.credit", transactional=True)
def credit(payload: Any, ctx: JobContext) -> None:
    assert ctx.connection is not None
    ctx.connection.cursor().execute(  # the DB-API connection, the job's transaction open
        "INSERT INTO ops_ledger (message_id, amount) VALUES (%(m)s, %(a)s)",
        {"m": ctx.message_id, "a": int(payload["amount"])},
    )
