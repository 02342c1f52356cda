"""Make the README's picture of the overview: ``python -m tests.dashboard.screenshot OUT.png``.

It writes an hour of three workers' per-minute counts on a fresh SQLite database through
the worker's own ``Tally`` with its clock set back minute by minute (a real hour would be
a long wait for a picture), records intents through ``record()``, hands them off with the
relay, and runs a worker whose handler fails some jobs for good. The dashboard is served
by uvicorn and photographed by the same headless Chromium the tests use.
"""

from __future__ import annotations

import math
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from outbox.dashboard import create_app
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import control
from outbox.queue.throughput import DEAD, RETRIED, SUCCEEDED, Tally
from tests.dashboard import seed
from tests.dashboard.conftest import CHROMIUM
from tests.fixtures.ports import free_port

QUEUES = {"mail": 0.45, "search": 0.3, "webhooks": 0.25}


def _history(url: str) -> None:
    """An hour of three workers' per-minute counts, written through the worker's own
    ``Tally`` with its clock set to each minute in turn (the real statement, the real
    table), then the intents, hand-offs and dead letters of now."""
    rng = random.Random(7)
    now = time.time()
    with Database(url).connect() as conn:
        for worker in ("worker-1", "worker-2", "worker-3"):
            wall = [now]
            tally = Tally(f"host:{worker}", wall=lambda w=wall: w[0])
            for minute in range(60):
                wall[0] = (now // 60 - (59 - minute)) * 60 + 30
                load = 38 + 22 * math.sin(minute / 9) + rng.randint(-6, 6)
                for queue, share in QUEUES.items():
                    n = int(load * share)
                    tally.add(SUCCEEDED, seed.claimed(queue, n))
                    retried = (rng.random() < 0.12) * rng.randint(1, 3)
                    tally.add(RETRIED, seed.claimed(queue, retried))
                    tally.add(DEAD, seed.claimed(queue, int(rng.random() < 0.04)))
            wall[0] = now
            tally.flush(conn.driver)
    for queue in QUEUES:
        seed.intents(url, 30, queue=queue)
    seed.relay(url)
    dead = seed.dead_letters(url, 14, message="smtp: 550 mailbox unavailable")
    for message_id in dead:  # the worker ran them in a queue of their own
        stamp = int(now * 1000) - rng.randint(0, 59) * 60_000
        seed.scalar(url, "UPDATE outbox_failed_jobs SET failed_at = ?, queue = 'mail' "
                    "WHERE message_id = ?", stamp, message_id)
    # Their worker's counts are in that queue, at this minute; the hour above has its own.
    seed.scalar(url, "DELETE FROM outbox_throughput WHERE queue LIKE ?", "dead-%")


def _now(url: str) -> None:
    seed.quarantined(url, 1)  # (its relay run hands off whatever else is pending)
    seed.intents(url, 37, queue="mail")
    seed.push_jobs(url, "billing", ["billing.charge"] * 64)
    seed.push_jobs(url, "billing", ["billing.reminder"] * 120, delay=3600)
    held = seed.push_jobs(url, "search", ["search.index"] * 8)
    for message_id in held:
        seed.scalar(url, "UPDATE outbox_jobs SET reserved_by = 'worker-1', lease_expires_at = ? "
                    "WHERE message_id = ?", int(time.time() * 1000) + 30_000, message_id)
    # Mail keeps a backlog; most webhooks ran (a finished job leaves no row).
    seed.scalar(url, "DELETE FROM outbox_jobs WHERE queue = 'webhooks' AND id % 9 <> 0")
    seed.scalar(url, "DELETE FROM outbox_jobs WHERE queue = 'mail' AND id % 4 <> 0")
    seed.scalar(url, "DELETE FROM outbox_jobs WHERE queue = 'search' AND reserved_by IS NULL "
                "AND id % 5 <> 0")


def main(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'outbox.db'}"
        with Database(url).connect() as conn:
            migrate(conn)
        _history(url)
        _now(url)
        control.pause(url, "webhooks")  # an operator paused one queue: its state shows
        server = uvicorn.Server(uvicorn.Config(create_app(url), host="127.0.0.1",
                                               port=free_port(), log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800},
                                    device_scale_factor=1)
            page.goto(f"http://127.0.0.1:{server.config.port}/")
            page.screenshot(path=str(out), full_page=True)
            browser.close()
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"))
