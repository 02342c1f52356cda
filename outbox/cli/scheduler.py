"""``outbox scheduler`` and ``outbox schedule list``: periodic jobs.

The scheduler records each due tick of the registry's periodic jobs through
``record()`` (key ``schedule:<name>:<tick>``); any number may run at once. The list
shows each schedule's last recorded and next tick; never a payload.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click
import orjson

from outbox.cli import preflight
from outbox.cli.app import load_registry
from outbox.cli.context import CliContext, pass_cli
from outbox.db.connection import Database
from outbox.queue.registry import Registry
from outbox.schedule import store
from outbox.schedule.service import (
    CATCH_UP_POLICIES,
    Scheduler,
    SchedulerConfig,
    recent_ticks,
    status,
)

_APP_HELP = "MODULE:ATTR of a Registry."


@click.command("scheduler")
@click.option("--app", required=True, help=_APP_HELP)
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UP_POLICIES),
    default="latest",
    show_default=True,
    help="Missed ticks to record: the newest only, all of them, or none.",
)
@click.option(
    "--catch-up-window",
    type=click.FloatRange(min=0),
    default=86_400.0,
    show_default=True,
    help="Seconds the first look after start reaches back.",
)
@click.option(
    "--max-catch-up",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="With --catch-up all: the most ticks recorded per schedule per look.",
)
@click.option("--once", is_flag=True, help="Look once, record what is due, and exit.")
@pass_cli
def scheduler_command(
    cli: CliContext,
    app: str,
    catch_up: str,
    catch_up_window: float,
    max_catch_up: int,
    once: bool,
) -> None:
    """Record the due ticks of the registry's periodic jobs, until SIGTERM/SIGINT.

    Each tick is recorded once however many schedulers run (its key decides). A
    scheduler that was down records missed ticks as --catch-up says.
    """
    registry = load_registry(app)
    if not len(registry.schedules):
        raise click.BadParameter(f"{app} declares no periodic jobs", param_hint="--app")
    config = SchedulerConfig(
        catch_up=catch_up,  # type: ignore[arg-type]
        catch_up_window=catch_up_window,
        max_catch_up=max_catch_up,
    )
    database = cli.database()
    with preflight.stop_on_signals() as stop:
        try:
            preflight.ready(database, wait=not once, stop=stop)
        except preflight.Stopped:
            return
        with Scheduler(database, registry, config) as scheduler:
            if once:
                known = _recorded_already(database, registry, max_catch_up)
                done = scheduler.run_once()
                new = sum(r.tick not in known[r.schedule] for r in done)
                again = f"; {len(done) - new} due were recorded already" if len(done) > new else ""
                click.echo(f"recorded {new} new {'tick' if new == 1 else 'ticks'}{again}")
                return
            total = scheduler.watch(stop)
    click.echo(f"scheduler stopped; recorded {total} {'tick' if total == 1 else 'ticks'}")


def _recorded_already(
    database: Database, registry: Registry, recent: int
) -> dict[str, set[datetime]]:
    """Each schedule's latest ticks that are recorded now: what ``--once`` finds again
    (its ``record()`` returns the same message id) is not a tick it recorded."""
    with database.connect() as conn:
        now = datetime.fromtimestamp(store.now(conn), UTC)
        return {
            e.name: set(store.recorded_ticks(conn, e, recent_ticks(e, now, recent + 1)))
            for e in registry.schedules
        }


@click.group("schedule")
def schedule_group() -> None:
    """Inspect periodic jobs."""


@schedule_group.command("list")
@click.option("--app", required=True, help=_APP_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line.")
@pass_cli
def list_command(cli: CliContext, app: str, as_json: bool) -> None:
    """Each periodic job: cron, timezone, job, queue, last recorded tick, next tick.

    The last tick is searched among the 50 latest ticks, by key; "-" when none of
    them is recorded (or their keys were pruned).
    """
    registry = load_registry(app)
    with cli.connect() as conn:
        now = datetime.fromtimestamp(store.now(conn), UTC)
        rows = status(conn, registry, now)
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row).decode())
        return
    if not rows:
        click.echo(f"no schedules: {app} declares no periodic jobs")
        return
    click.echo(
        f"{'NAME':24} {'CRON':16} {'TIMEZONE':16} {'JOB':24} {'QUEUE':12} "
        f"{'LAST_TICK':20} NEXT_TICK"
    )
    for row in rows:
        click.echo(
            f"{row['name']!s:24} {row['cron']!s:16} {row['timezone']!s:16} {row['job']!s:24} "
            f"{row['queue']!s:12} {_tick(row['last_tick']):20} {_tick(row['next_tick'])}"
        )


def _tick(value: object) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, datetime) else "-"


commands = [scheduler_command, schedule_group]
