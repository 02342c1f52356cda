"""The app worker processes load in the queue-control tests (priorities, pause, cancel,
snooze): ``--app tests.control_app:registry``.

Each handler appends one line per event to ``$OUTBOX_TEST_RUNLOG/<pid>.log``:
``<ns> <message_id> <attempt> <event> [<detail>]`` (``ns`` from ``time.time_ns()``), so a
test reads what ran, in what order, across processes, without touching the queue tables.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from outbox import Registry, Snooze
from outbox.queue import JobContext

registry = Registry()


def note(ctx: JobContext, event: str, detail: object = "") -> None:
    folder = os.environ.get("OUTBOX_TEST_RUNLOG")
    if not folder:
        return
    line = f"{time.time_ns()} {ctx.message_id} {ctx.attempt} {event} {detail}".rstrip()
    with open(Path(folder) / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def lines(folder: Path) -> list[list[str]]:
    """Every line of every process, split, ordered by time."""
    out = []
    for f in folder.glob("*.log"):
        out.extend(line.split() for line in f.read_text(encoding="utf-8").splitlines())
    return sorted(out, key=lambda parts: int(parts[0]))


@registry.job("c.ran")
def ran(payload: Any, ctx: JobContext) -> None:
    """Notes its start with the priority the payload names, then works ``s`` seconds."""
    note(ctx, "start", payload.get("p", "-"))
    time.sleep(float(payload.get("s", 0)))


@registry.job("c.until_cancelled")
def until_cancelled(payload: Any, ctx: JobContext) -> None:
    """Works until the operator cancels it (or 60 s), then returns normally."""
    note(ctx, "start")
    deadline = time.monotonic() + 60
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    note(ctx, "saw_cancel" if ctx.cancelled else "gave_up")


@registry.job("c.async_until_cancelled")
async def async_until_cancelled(payload: Any, ctx: JobContext) -> None:
    """Sleeps 60 s unless cancelled; notes the cancellation and lets it propagate."""
    note(ctx, "start")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        note(ctx, "async_cancelled")
        raise
    note(ctx, "gave_up")


@registry.job("c.snooze")
def snooze(payload: Any, ctx: JobContext) -> None:
    """Snoozes ``times`` times (counted in the payload's run log), then succeeds."""
    runs = _runs_of(ctx.message_id)
    note(ctx, "start")
    if runs < int(payload["times"]):
        raise Snooze(float(payload.get("s", 0.05)))


def _runs_of(message_id: str) -> int:
    folder = os.environ.get("OUTBOX_TEST_RUNLOG")
    if not folder:
        return 0
    return sum(1 for parts in lines(Path(folder)) if parts[1] == message_id)
