"""The app the global-limits tests run in real worker processes
(``--app tests.limits_app:registry``).

Each handler appends ``<name> <key> <message_id> <attempt> start|end <unix time>`` to a
ledger file of its process under ``$OUTBOX_TEST_RUNLOG``: the tests rebuild from it
which jobs ran at once and how many started in any window, across processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from outbox import Registry
from outbox.queue import JobContext

registry = Registry()
PER_KEY = 2
RATE = 20  # per second
HOLD = 1


def _ledger(ctx: JobContext, key: object, what: str) -> None:
    folder = os.environ["OUTBOX_TEST_RUNLOG"]
    line = f"{ctx.job_name} {key} {ctx.message_id} {ctx.attempt} {what} {time.time():.6f}\n"
    with open(Path(folder) / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
        f.write(line)


def _run(payload: Any, ctx: JobContext) -> None:
    key = payload.get("account", "-")
    _ledger(ctx, key, "start")
    seconds = payload["s"] if ctx.attempt == 1 else payload.get("s_retry", payload["s"])
    time.sleep(float(seconds))
    _ledger(ctx, key, "end")


@registry.job("l.keyed", concurrency=PER_KEY, concurrency_key=lambda p: p["account"])
def keyed(payload: Any, ctx: JobContext) -> None:
    _run(payload, ctx)


@registry.job("l.rated", rate=f"{RATE}/s")
def rated(payload: Any, ctx: JobContext) -> None:
    _run(payload, ctx)


@registry.job("l.hold", concurrency=HOLD)
def hold(payload: Any, ctx: JobContext) -> None:
    _run(payload, ctx)


@registry.job("l.plain")
def plain(payload: Any, ctx: JobContext) -> None:
    _run(payload, ctx)


@registry.job("l.bad_key", concurrency=1, concurrency_key=lambda p: p["missing"])
def bad_key(payload: Any, ctx: JobContext) -> None:
    _run(payload, ctx)
