"""The handlers the workflow race tests' worker processes run (``--app
tests.reliability.workflow_app:registry``).

Each run appends ``start`` and ``end`` lines to a ledger file of its process under
``$WF_LEDGER`` (``<event> <node> <attempt> <unix time> <ok|EARLY>``), written and
flushed before the handler returns, so a run that dies before its acknowledgement is
still seen. At start a node checks, through ``ctx.results``, that every dependency it
names in its payload has succeeded (their results are written in their
acknowledgement's transaction); a dependency missing is written as ``EARLY``.
A payload ``{"until": t}`` returns at UNIX time ``t`` (parents acknowledged at once);
``{"sleep_first": s}`` sleeps ``s`` seconds on the first attempt (to be
SIGKILLed in); ``{"fail": true}`` raises on every attempt.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from outbox.queue import Backoff, JobContext
from outbox.queue.registry import Registry

registry = Registry()


def _line(text: str) -> None:
    folder = Path(os.environ["WF_LEDGER"])
    with open(folder / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())


@registry.job("wf.node", max_attempts=3, backoff=Backoff(base=0.05, cap=0.2))
def node(payload: dict[str, Any], ctx: JobContext) -> Any:
    name = payload["name"]
    missing = [d for d in payload.get("after", []) if d not in ctx.results]
    verdict = "EARLY" if missing and not payload.get("cleanup") else "ok"
    _line(f"start {name} {ctx.attempt} {time.time():.6f} {verdict}")
    if payload.get("until"):  # parents of one fan-in finish at the same instant
        time.sleep(max(0.0, float(payload["until"]) - time.time()))
    if ctx.attempt == 1 and payload.get("sleep_first"):
        time.sleep(float(payload["sleep_first"]))
    if payload.get("fail"):
        _line(f"fail {name} {ctx.attempt} {time.time():.6f} ok")
        raise RuntimeError("this node always fails")
    _line(f"end {name} {ctx.attempt} {time.time():.6f} ok")
    return {"name": name, "pid": os.getpid()}
