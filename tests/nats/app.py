"""Handlers the NATS tests' workers run. Each execution appends ``message_id attempt
pid`` to the file named by ``NATS_TEST_LEDGER`` (one ``write`` per line, O_APPEND), so
a test counts real executions across processes, killed ones included."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from outbox import Backoff, PermanentFailure, Registry, Snooze

registry = Registry()
QUICK = Backoff(base=0.05, cap=0.1, jitter=False)


def _ledger(ctx: Any, what: str = "ran") -> None:
    fd = os.open(os.environ["NATS_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.message_id} {ctx.attempt} {os.getpid()} {what}\n".encode())
    finally:
        os.close(fd)


@registry.job("t.ok", max_attempts=20, backoff=QUICK)
def ok(payload: Any, ctx: Any) -> None:
    _ledger(ctx)


@registry.job("t.fail", max_attempts=2, backoff=QUICK)
def fail(payload: Any, ctx: Any) -> None:
    _ledger(ctx)
    raise RuntimeError("secret-exception-text")


@registry.job("t.perm", backoff=QUICK)
async def perm(payload: Any, ctx: Any) -> None:
    _ledger(ctx)
    raise PermanentFailure("cannot ever work")


@registry.job("t.slow", max_attempts=5, backoff=QUICK)
def slow(payload: Any, ctx: Any) -> None:
    _ledger(ctx, "start")
    time.sleep(float(payload["s"]))
    _ledger(ctx)


@registry.job("t.aslow", max_attempts=5, backoff=QUICK)
async def aslow(payload: Any, ctx: Any) -> None:
    _ledger(ctx, "start")
    await asyncio.sleep(float(payload["s"]))
    _ledger(ctx)


# How many t.gauge / t.agauge jobs run at once in this process, and the most seen.
gauge = {"now": 0, "most": 0}
_gauge_lock = threading.Lock()


def _gauge(step: int) -> None:
    with _gauge_lock:
        gauge["now"] += step
        gauge["most"] = max(gauge["most"], gauge["now"])


@registry.job("t.gauge", backoff=QUICK)
def sync_gauge(payload: Any, ctx: Any) -> None:
    _gauge(1)
    try:
        time.sleep(float(payload["s"]))
    finally:
        _gauge(-1)
    _ledger(ctx)


@registry.job("t.agauge", backoff=QUICK)
async def async_gauge(payload: Any, ctx: Any) -> None:
    _gauge(1)
    try:
        await asyncio.sleep(float(payload["s"]))
    finally:
        _gauge(-1)
    _ledger(ctx)


# Runs of each t.plan job in this process: its payload's "plan" says what each run does.
plan_runs: dict[str, int] = {}


@registry.job("t.plan", max_attempts=5, backoff=QUICK)
def plan(payload: Any, ctx: Any) -> None:
    """Each run takes the next step of ``payload["plan"]``: "fail", "snooze" (for
    ``payload["s"]`` seconds, default 0), else succeed; the ledger says which."""
    run = plan_runs[ctx.message_id] = plan_runs.get(ctx.message_id, 0) + 1
    step = payload["plan"][min(run, len(payload["plan"])) - 1]
    _ledger(ctx, step)
    if step == "fail":
        raise RuntimeError("planned failure")
    if step == "snooze":
        raise Snooze(payload.get("s", 0))


@registry.job("t.stuck", max_attempts=2, backoff=QUICK, timeout=0.3)
def stuck(payload: Any, ctx: Any) -> None:
    """Sleeps past its 0.3 s timeout (a sync handler cannot be interrupted)."""
    _ledger(ctx, "start")
    time.sleep(float(payload["s"]))
    _ledger(ctx)


transactional = Registry()


@transactional.job("t.tx", transactional=True)
def tx(payload: Any, ctx: Any) -> None:
    return None


limited = Registry()


@limited.job("t.limited", concurrency=2)
def limited_job(payload: Any, ctx: Any) -> None:
    return None


@registry.job("t.watch", max_attempts=5, backoff=QUICK)
def watch(payload: Any, ctx: Any) -> None:
    """Runs until ``ctx.cancelled`` (at most ``payload["s"]`` seconds); says which."""
    _ledger(ctx, "start")
    end = time.monotonic() + float(payload["s"])
    while time.monotonic() < end:
        if ctx.cancelled:
            _ledger(ctx, "saw-cancel")
            return
        time.sleep(0.02)
    _ledger(ctx)


once = Registry()


@once.job("t.tx.once", transactional=True, max_attempts=1)
def tx_once(payload: Any, ctx: Any) -> None:
    """One attempt only; its business row (the fault harness's ledger) commits with the
    inbox id. ``HARNESS_URL`` names the database."""
    from tests.reliability.ledger_app import INSERT, placeholder, started_ms

    ph = placeholder(os.environ["HARNESS_URL"])
    ctx.connection.cursor().execute(
        INSERT.format(", ".join([ph] * 5)),
        (ctx.message_id, str(os.getpid()), ctx.attempt, 1, started_ms()),
    )
