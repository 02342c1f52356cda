"""SIGTERM/SIGINT for a service run in the main thread: the first stops it gracefully,
the second at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def handled(
    stop: Callable[[], None], stop_now: Callable[[], None], asked: Callable[[], bool]
) -> Iterator[None]:
    """Within the block, a signal calls ``stop``, or ``stop_now`` once ``asked()`` says a
    stop was asked already. Outside the main thread signals cannot be caught: nothing
    changes. The previous handlers come back after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, _frame: Any) -> None:
        (stop_now if asked() else stop)()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
