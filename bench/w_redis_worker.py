"""Measured children for ``s_redis_worker``: the Redis broker worker, as users run it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.data import QUEUE


def cli_worker(redis: str) -> Callable[[], dict[str, Any]]:
    """``outbox worker bench --broker redis://… --stop-when-empty`` with the CLI's
    defaults otherwise (the SQL drain beside it is ``bench.w_outbox:cli_worker``)."""
    from outbox.cli import main

    args = ["--log-level", "warning", "worker", QUEUE, "--app", "bench.w_outbox:APP"]
    args += ["--stop-when-empty", "--broker", redis]

    def work() -> dict[str, Any]:
        main.main(args, prog_name="outbox", standalone_mode=False)
        return {}

    return work
