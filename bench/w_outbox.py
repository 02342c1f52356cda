"""Our workloads: the relay handing off preloaded intents, the worker draining jobs."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from bench.data import JOB_NAME, QUEUE


def missing(feature: str) -> str | None:
    """``None`` when the product has ``feature`` (``relay``/``worker``); else why not."""
    names = {"relay": ("outbox.relay", "Relay"), "worker": ("outbox.queue", "Worker")}
    module, attr = names[feature]
    try:
        if hasattr(importlib.import_module(module), attr):
            return None
    except ImportError:
        pass
    return "pending product"


def relay(url: str, batch: int) -> Callable[[], dict[str, Any]]:
    from outbox.db.connection import Database
    from outbox.relay import Relay, RelayConfig

    r = Relay(Database(url), RelayConfig(batch_size=batch))
    r._conn.get()  # connect before GO: connecting is not what is measured

    def work() -> dict[str, Any]:
        totals = r.run()
        r.close()
        return {"count": totals.handed_off}

    return work


def registry() -> Any:
    """The benchmark's app: one no-op handler (``--app bench.w_outbox:APP``)."""
    from outbox import Registry

    reg = Registry()

    @reg.job(JOB_NAME)
    def noop(payload: Any, ctx: Any) -> None:
        return None

    return reg


class NoTally:
    """The bench's switch for the dashboard's per-minute counts: counts nothing, writes
    nothing (``tally=False``), to measure what counting costs the worker."""

    pending = False

    def add(self, column: int, queues: Any) -> None:
        return None

    def flush(self, driver: Any) -> None:
        return None


def worker(
    url: str, concurrency: int, prefetch: int, tally: bool = True
) -> Callable[[], dict[str, Any]]:
    from outbox.db.connection import Database
    from outbox.queue import Worker, WorkerConfig

    w = Worker(
        Database(url),
        registry(),
        WorkerConfig(
            queues={QUEUE: None}, concurrency=concurrency, prefetch=prefetch, stop_when_empty=True
        ),
    )
    if not tally:
        w._db.tally = NoTally()  # type: ignore[assignment]

    def work() -> dict[str, Any]:
        cpu = time.process_time()  # every thread of this process: the worker's whole cost
        result = w.run()
        return {"count": _count(result), "cpu_s": time.process_time() - cpu}

    return work


def cli_worker(url: str) -> Callable[[], dict[str, Any]]:
    """``outbox worker bench --app bench.w_outbox:APP`` with the CLI's defaults, as a user
    runs it (``--stop-when-empty`` only ends the drain; ``--log-level warning`` keeps
    the pipes quiet). In-process, so the interpreter's start-up is not timed; the
    caller counts the jobs that left the queue."""
    from outbox.cli import main

    args = ["--database-url", url, "--log-level", "warning", "worker", QUEUE]
    args += ["--app", "bench.w_outbox:APP", "--stop-when-empty"]

    def work() -> dict[str, Any]:
        main.main(args, prog_name="outbox", standalone_mode=False)
        return {}

    return work


def _count(result: Any) -> int:
    return int(result.succeeded)


def serve(url: str, app: str, concurrency: int, prefetch: int, until_empty: bool) -> None:
    """A worker process until SIGTERM (or until empty), as ``outbox worker`` would run it."""
    from outbox.db.connection import Database
    from outbox.queue import Worker, WorkerConfig

    module, _, attr = app.partition(":")
    reg = getattr(importlib.import_module(module), attr)
    w = Worker(
        Database(url),
        reg,
        WorkerConfig(
            queues={QUEUE: None},
            concurrency=concurrency,
            prefetch=prefetch,
            stop_when_empty=until_empty,
        ),
    )
    with w.signals_handled():
        w.run()


def __getattr__(name: str) -> Any:
    # ``--app bench.w_outbox:APP`` for the CLI worker; built on first use.
    if name == "APP":
        return registry()
    raise AttributeError(name)


if __name__ == "__main__":
    import sys

    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
