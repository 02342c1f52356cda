"""The workflow scenario's worker app (``--app bench.w_workflow:APP``): a no-op handler
that appends ``<node name> <unix time>`` to ``$BENCH_WORKFLOW_FILE`` as its first act,
so the scenario reads when each node started (the database's clock, on the same machine,
gives when each dependency was acknowledged)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

NODE = "bench.wf_node"
_lock = threading.Lock()
_out: list[Any] = []


def _sink() -> Any:
    if not _out:
        _out.append(open(os.environ["BENCH_WORKFLOW_FILE"], "a", buffering=1))  # noqa: SIM115
    return _out[0]


def _build() -> Any:
    from outbox import Registry

    reg = Registry()

    @reg.job(NODE)
    def node(body: Any, ctx: Any) -> None:
        line = f"{body['n']} {time.time():.6f}\n"
        with _lock:
            _sink().write(line)

    return reg


APP = _build()
