"""SIGTERM stops ``relay --watch``, the scheduler and the broker worker whatever the main
thread is doing when it lands, also halfway into ``stop.wait()``.

A CI run once found a relay that had logged ``relay.watch`` and then ignored SIGTERM for
60 s (``test_workers_and_relays_killed_at_random_lose_nothing``: relay1 exited -9). The
handler called ``threading.Event.set()``, which takes the event's lock; when the signal
landed while the main thread held that same lock, inside ``stop.wait()``, the handler
waited for itself forever. The window is a few bytecodes, so the child below opens it
thousands of times: it polls with ``stop.wait(0)`` (the lock taken and given back in a
tight loop) while a thread signals the process at random instants.
"""

from __future__ import annotations

import subprocess
import sys

from tests.fixtures.fault_harness import ROOT

ROUNDS = 40

CHILD = f"""
import os, random, signal, threading
from outbox.cli import preflight

rng = random.Random(7)
for _ in range({ROUNDS}):
    with preflight.stop_on_signals() as stop:
        timer = threading.Timer(rng.uniform(0, 0.005), os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        while not stop.is_set():
            stop.wait(0)
        timer.join()
print("stopped every time")
"""


def test_sigterm_stops_a_loop_waiting_on_the_stop_event_at_any_instant() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("a SIGTERM was never acted on: the signal handler hung") from exc
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "stopped every time"
