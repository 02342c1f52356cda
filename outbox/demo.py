"""``outbox demo``: the whole product in one command, on a real database.

Simulated application transactions write a business row and ``record()`` a job intent
in the same transaction; some roll back, some ask for a later time, some fail once, one
always fails. The relay hands the committed intents to the queue, a worker runs them
until the demo's queue is empty, and the summary says what happened to each kind —
and checks it: no rolled-back intent ran, every committed one ran or is a dead letter.

It also shows a periodic job (the scheduler records its latest tick through ``record()``),
an event fanned out to two listeners (``emit``: one intent per listener), and queue
control: the worker starts on a paused queue, claims nothing while it stays paused, and
drains it once it is resumed.

Each run uses a queue and keys of its own, so running it twice on one database is fine.
"""

from __future__ import annotations

import os
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.db.url import secrets_of
from outbox.events import Event, emit
from outbox.job import Job
from outbox.queue.backoff import Backoff
from outbox.queue.context import JobContext
from outbox.queue.control import pause, resume
from outbox.queue.registry import Registry
from outbox.queue.worker import Worker, WorkerConfig, WorkerStats
from outbox.record import record
from outbox.relay import Relay
from outbox.schedule.service import Scheduler

ROLLBACK_EVERY = 10
DELAY_EVERY = 15
FLAKY_EVERY = 7
DELAY_S = 2.0
PAUSED_S = 0.5  # how long the worker polls the paused queue (5 of its 0.1 s polls)
POISON_ATTEMPTS = 3
DEMO_BACKOFF = Backoff(base=0.2, cap=1.0)
_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql", "sqlite": "sqlite"}

# The simulated application's own table: its business rows commit with the intents.
_app = MetaData()
demo_notes = Table("demo_notes", _app, Column("run", String(32)), Column("note_id", Integer))


@dataclass
class Tally:
    """What the simulated application did, and what the handlers saw."""

    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    delayed: set[int] = field(default_factory=set)
    ran: set[int] = field(default_factory=set)
    periodic: int = 0
    listeners: set[str] = field(default_factory=set)
    claimed_while_paused: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


EVENT = "demo.notes_imported"


def demo_registry(tally: Tally, queue: str = "default", run: str = "") -> Registry:
    registry = Registry()

    @registry.job("demo.digest")
    def digest(payload: dict[str, Any], ctx: JobContext) -> None:
        with tally.lock:
            tally.periodic += 1

    # Every minute; named after the run, so each run has ticks (keys) of its own.
    registry.schedule("* * * * *", name=f"demo.{run or 'x'}.digest", job="demo.digest", queue=queue)

    def listener(name: str) -> Callable[[Any, JobContext], None]:
        def run_listener(payload: Any, ctx: JobContext) -> None:
            with tally.lock:
                tally.listeners.add(name)

        return run_listener

    registry.listen(EVENT, listener("notify_team"), name="demo.notify_team", queue=queue)
    registry.listen(EVENT, listener("update_feed"), name="demo.update_feed", queue=queue)

    @registry.job("demo.index_note", backoff=DEMO_BACKOFF)
    def index_note(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload.get("flaky") and ctx.attempt == 1:
            raise ConnectionError("search index briefly unavailable")
        with tally.lock:
            tally.ran.add(int(payload["note_id"]))

    @registry.job("demo.poison", max_attempts=POISON_ATTEMPTS, backoff=DEMO_BACKOFF)
    def poison(payload: Any, ctx: JobContext) -> None:
        raise ValueError("this job can never succeed")

    return registry


def _simulate(
    database: Database, registry: Registry, queue: str, run: str, intents: int, tally: Tally
) -> None:
    url = database.url.set(drivername=_DRIVERS[database.dialect.name])
    engine = create_engine(url.render_as_string(hide_password=False))
    _app.create_all(engine)
    for i in range(intents):
        try:
            with engine.begin() as conn:
                conn.execute(insert(demo_notes).values(run=run, note_id=i))
                at = time.time() + DELAY_S if i % DELAY_EVERY == 1 else 0
                job = Job("demo.index_note", {"note_id": i, "flaky": i % FLAKY_EVERY == 3}, queue)
                record(conn, f"demo:{run}:note:{i}", job, available_at=at)
                if i % ROLLBACK_EVERY == 5:
                    raise _UserCancelled
        except _UserCancelled:
            tally.rolled_back.add(i)
            continue
        tally.committed.add(i)
        if at:
            tally.delayed.add(i)
    with engine.begin() as conn:
        record(conn, f"demo:{run}:poison", Job("demo.poison", {"why": "always fails"}, queue))
        emit(conn, f"demo:{run}:imported", Event(EVENT, {"run": run}), registry=registry)
    engine.dispose()


class _UserCancelled(Exception):
    """The simulated user cancels: the transaction rolls back, intent and all."""


def _drain(database: Database, registry: Registry, queue: str, tally: Tally) -> WorkerStats:
    """Run a worker until the demo's queue is empty (delayed and retried jobs included).

    The queue is paused first: the worker polls it for ``PAUSED_S`` and claims nothing;
    then the queue is resumed and drained.
    """
    config = WorkerConfig(queues={queue: 4}, prefetch=50, sleep=0.1, lease=10, listen=False)
    worker = Worker(database, registry, config)
    pause(database, queue)
    thread = threading.Thread(target=worker.run, name="outbox-demo-worker")
    thread.start()
    with database.connect() as conn:
        time.sleep(PAUSED_S)
        tally.claimed_while_paused = worker.stats.claimed
        resume(conn, queue)
        while conn.driver.queue_job_count(queue):
            time.sleep(0.1)
    worker.stop()
    thread.join()
    return worker.stats


def run_demo(database: Database, *, intents: int, echo: Callable[[str], None]) -> Tally:
    run = secrets.token_hex(4)
    queue = f"demo-{run}"
    tally = Tally()
    with database.connect() as conn:
        migrate(conn)
    echo(f"outbox demo on {database.describe()} (queue {queue})")
    echo(f"  every {FLAKY_EVERY}th job is set to fail once, to show retries with backoff,")
    echo("  and one poison job always fails, to show a dead letter")
    began = time.monotonic()
    registry = demo_registry(tally, queue, run)
    _simulate(database, registry, queue, run, intents, tally)
    echo(f"  {intents} application transactions: {len(tally.committed)} committed with an intent,")
    echo(f"      {len(tally.rolled_back)} rolled back (their intents vanished with them),")
    echo("      and one poison job that always fails")
    echo(f"  one event, {EVENT}: one intent for each of its 2 listeners")
    with Scheduler(database, registry) as scheduler:
        ticks = scheduler.run_once()
    echo(f"  scheduler recorded    {len(ticks):>4} tick of a periodic job (every minute)")
    totals = Relay(database).run()
    echo(f"  relay handed off      {totals.handed_off:>4} intents to the queue")
    stats = _drain(database, registry, queue, tally)
    _summary(tally, stats, echo)
    took = time.monotonic() - began
    prefix = try_prefix(database)
    echo(f"  done in {took:.1f} s. Try: {prefix} queue failed; {prefix} status")
    return tally


def try_prefix(database: Database) -> str:
    """The closing hint's command, runnable as printed: this ``outbox`` by its path when
    its virtualenv is not active (not on PATH), and the database the demo ran on (its
    password never printed: then the URL is read from ``$OUTBOX_DATABASE_URL``)."""
    command = "outbox"
    in_venv = sys.prefix != sys.base_prefix
    if in_venv and os.environ.get("VIRTUAL_ENV") != sys.prefix:
        exe = Path(sys.prefix) / "bin" / "outbox"
        try:
            command = str(exe.relative_to(Path.cwd()))
        except ValueError:
            command = str(exe)
    secret = secrets_of(database.url)
    shown = '"$OUTBOX_DATABASE_URL"' if secret else shlex.quote(database.describe())
    return f"{command} --database-url {shown}"


def _summary(tally: Tally, stats: WorkerStats, echo: Callable[[str], None]) -> None:
    ran_rolled_back = tally.ran & tally.rolled_back
    missing = tally.committed - tally.ran
    echo(
        f"  paused, then resumed  {tally.claimed_while_paused or 0:>4} jobs claimed in "
        f"{PAUSED_S} s paused; drained once resumed"
    )
    echo(f"  succeeded             {stats.succeeded:>4} jobs")
    echo(
        f"      of which delayed  {len(tally.delayed):>4} "
        f"(ran after their time, {DELAY_S:.0f} s on)"
    )
    echo(f"  retried               {stats.retried:>4} failed attempts, run again after a backoff")
    echo(f"  dead-lettered         {stats.dead:>4} (demo.poison, after {POISON_ATTEMPTS} attempts)")
    echo(f"  rolled back, never run {len(tally.rolled_back):>3}")
    echo(f"  periodic job ran      {tally.periodic:>4} time (recorded under its tick's key)")
    echo(
        f"  event listeners ran   {len(tally.listeners):>4} ({', '.join(sorted(tally.listeners))})"
    )
    verdict = (
        "OK" if not ran_rolled_back and not missing and not tally.claimed_while_paused
        else "MISMATCH"
    )
    echo(
        f"  check: {verdict} — rolled-back intents that ran: {len(ran_rolled_back)}, "
        f"committed intents that did not run: {len(missing)}"
    )
