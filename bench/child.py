"""The child side of a measured process: prepare, say READY, wait for GO, run, report.

``python -m bench.child MODULE:FUNC JSON_KWARGS``. ``FUNC(**kwargs)`` does the set-up
(imports, connections, preloading) and returns the workload as a callable (sync, or a
coroutine function when FUNC is async). Only the workload is timed, with the
system-wide monotonic clock so the parent can merge several children's windows.
Stdlib only: this also runs under the oban-py environment, which has no outbox.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import time
from typing import Any


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _report(t0: float, t1: float, extra: Any) -> None:
    out = {"t0": t0, "t1": t1}
    if isinstance(extra, dict):
        out.update(extra)
    print("RESULT " + json.dumps(out), flush=True)


def _run_sync(func: Any, kwargs: dict[str, Any]) -> None:
    work = func(**kwargs)
    print("READY", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    extra = work()
    _report(t0, time.monotonic(), extra)


async def _run_async(func: Any, kwargs: dict[str, Any]) -> None:
    work = await func(**kwargs)
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    t0 = time.monotonic()
    extra = await work()
    _report(t0, time.monotonic(), extra)


def main() -> None:
    func = _load(sys.argv[1])
    kwargs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if inspect.iscoroutinefunction(func):
        try:
            import uvloop  # the peers' own runners default to it
        except ImportError:
            asyncio.run(_run_async(func, kwargs))
        else:
            uvloop.run(_run_async(func, kwargs))
    else:
        _run_sync(func, kwargs)


if __name__ == "__main__":
    main()
