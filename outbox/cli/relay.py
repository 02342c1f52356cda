"""``outbox relay``, ``status``, ``failed``, ``retry`` and ``prune``.

Thin: each command parses its arguments, calls ``outbox.relay`` and prints a summary.
Output carries ids, counts, reason codes and times; never a payload or an exception
message. Progress bars go to stderr, and only when it is a terminal.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType

import click
import orjson

from outbox.cli.context import CliContext, pass_cli
from outbox.cli.serving import metrics_options
from outbox.config import settings
from outbox.ids import is_message_id
from outbox.metrics import serving
from outbox.relay import Relay, RelayConfig, RunTotals, admin
from outbox.relay.service import MAX_BATCH_SIZE

EXIT_THRESHOLD = 3


@click.command("relay")
@click.argument("limit", type=click.IntRange(min=1), required=False)
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH_SIZE),
    default=500,
    show_default=True,
    help="Intents per batch (one transaction each).",
)
@click.option("--watch", is_flag=True, help="Keep relaying until SIGTERM/SIGINT.")
@click.option(
    "--fail-on-quarantine",
    is_flag=True,
    help="Without --watch: exit 3 when this run quarantined any intent (for cron).",
)
@click.option(
    "--poll-only",
    is_flag=True,
    help="With --watch: never LISTEN for wake-ups, only poll (e.g. behind PgBouncer).",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01, max=60),
    default=0.5,
    show_default=True,
    help="With --watch: seconds between polls while busy; doubles while idle, up to 5 s.",
)
@metrics_options("relay")
@pass_cli
def relay_command(
    cli: CliContext,
    limit: int | None,
    batch_size: int,
    watch: bool,
    fail_on_quarantine: bool,
    poll_only: bool,
    poll_interval: float,
    metrics_port: int | None,
    metrics_bind: str,
) -> None:
    """Move committed intents into the queue: up to LIMIT (default: all pending), then exit.

    With --watch it runs until SIGTERM or SIGINT, then finishes the batch in flight and
    exits 0. Rows that do not verify are quarantined (see `outbox failed`).
    """
    if watch and limit is not None:
        raise click.UsageError("LIMIT and --watch do not go together")
    if poll_only and not watch:
        raise click.UsageError("--poll-only goes with --watch")
    if metrics_port is not None and not watch:
        raise click.UsageError("--metrics-port goes with --watch")
    if fail_on_quarantine and watch:
        raise click.UsageError("--fail-on-quarantine goes with a one-shot relay, not --watch")
    config = RelayConfig(
        batch_size=batch_size,
        poll_interval=poll_interval,
        max_poll_interval=max(5.0, poll_interval),
        listen=not poll_only,
        notify=settings.notify,
    )
    with Relay(cli.database(), config) as relay:
        if watch:
            with (
                serving(relay.database, "relay", metrics_port, metrics_bind),
                _stop_on_signals() as stop,
            ):
                totals = relay.watch(stop)
        else:
            totals = _drain(relay, limit)
    click.echo(_summary(totals))
    if fail_on_quarantine and totals.quarantined:
        click.echo(f"quarantined {totals.quarantined} intents: see `outbox failed`", err=True)
        sys.exit(EXIT_THRESHOLD)


def _drain(relay: Relay, limit: int | None) -> RunTotals:
    if not sys.stderr.isatty():
        return relay.run(limit)
    with relay.database.connect() as conn:
        total = admin.pending_count(conn)
    length = total if limit is None else min(limit, total)
    with click.progressbar(length=length, label="relaying", file=sys.stderr) as bar:
        return relay.run(limit, progress=lambda batch: bar.update(batch.claimed))


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _summary(totals: RunTotals) -> str:
    return (
        f"relayed {totals.claimed} intents: {totals.handed_off} handed off, "
        f"{totals.quarantined} quarantined, in {totals.batches} "
        f"{'batch' if totals.batches == 1 else 'batches'} "
        f"({totals.ms / 1000:.2f} s in transactions)"
    )


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--max-pending",
    type=click.IntRange(min=0),
    help="Exit 3 when more than N intents are pending.",
)
@click.option(
    "--max-age",
    type=click.FloatRange(min=0),
    help="Exit 3 when the oldest pending intent is older than SECONDS.",
)
@click.option(
    "--max-failed",
    type=click.IntRange(min=0),
    help="Exit 3 when more than N intents are quarantined.",
)
@click.option(
    "--max-dead",
    type=click.IntRange(min=0),
    help="Exit 3 when more than N jobs are dead letters (all queues).",
)
@pass_cli
def status_command(
    cli: CliContext,
    as_json: bool,
    max_pending: int | None,
    max_age: float | None,
    max_failed: int | None,
    max_dead: int | None,
) -> None:
    """Counts of intents by state, age of the oldest pending one, and jobs per queue.

    Exits 3 when --max-pending, --max-age, --max-failed or --max-dead is exceeded (for
    cron and health checks). --json prints one object whose shape is versioned by its
    "schema_version" key.
    """
    with cli.connect() as conn:
        status = admin.status(conn)
    if as_json:
        click.echo(orjson.dumps(status.as_dict()).decode())
    else:
        _print_status(status)
    if status.outbox.unknown_state:
        click.echo(
            f"warning: {status.outbox.unknown_state} intents have a state other than "
            "pending/published/failed; the relay will not touch them",
            err=True,
        )
    problems = _exceeded(status.outbox, max_pending, max_age)
    if max_failed is not None and status.outbox.failed > max_failed:
        problems.append(f"{status.outbox.failed} quarantined > {max_failed}")
    if max_dead is not None and status.dead > max_dead:
        problems.append(f"{status.dead} dead letters > {max_dead}")
    for problem in problems:
        click.echo(f"threshold exceeded: {problem}", err=True)
    if problems:
        sys.exit(EXIT_THRESHOLD)


def _print_status(status: admin.Status) -> None:
    o = status.outbox
    age = "-" if o.oldest_pending_age_s is None else f"{o.oldest_pending_age_s:.1f} s"
    click.echo(
        f"outbox  pending {o.pending}  published {o.published}  failed {o.failed}  "
        f"oldest pending {age}"
    )
    for name, q in sorted(status.queues.items()):
        click.echo(
            f"queue {name}  ready {q.ready}  delayed {q.delayed}  reserved {q.reserved}  "
            f"dead {q.dead}"
        )


def _exceeded(o: admin.OutboxCounts, max_pending: int | None, max_age: float | None) -> list[str]:
    problems = []
    if max_pending is not None and o.pending > max_pending:
        problems.append(f"{o.pending} pending > {max_pending}")
    age = o.oldest_pending_age_s
    if max_age is not None and age is not None and age > max_age:
        problems.append(f"oldest pending is {age:.1f} s old > {max_age:g} s")
    return problems


@click.command("failed")
@click.argument("limit", type=click.IntRange(min=1), default=50)
@pass_cli
def failed_command(cli: CliContext, limit: int) -> None:
    """List up to LIMIT (default 50) quarantined intents: id, reason code, times.

    Payloads are never shown. Repair a row, then `outbox retry MESSAGE_ID`.
    """
    with cli.connect() as conn:
        rows = admin.failed(conn, limit)
    if not rows:
        click.echo("no quarantined intents")
        return
    click.echo(f"{'MESSAGE_ID':36}  {'REASON':22}  {'CREATED':29}  FAILED")
    for r in rows:
        click.echo(
            f"{r.message_id:36}  {r.reason or '-':22}  {_iso(r.created_at_ms):29}  "
            f"{_iso(r.failed_at_ms)}"
        )


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _message_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not is_message_id(value):
        raise click.BadParameter("not a message id (a UUID such as the ones `outbox failed` lists)")
    return value


@click.command("retry")
@click.argument("message_id", callback=_message_id)
@click.option(
    "--accept-current",
    is_flag=True,
    help="Accept the row's current contents as they are: rewrite the payload canonically "
    "and recompute the fingerprint (a producer replaying the original job then conflicts).",
)
@pass_cli
def retry_command(cli: CliContext, message_id: str, accept_current: bool) -> None:
    """Return a quarantined intent to pending once it verifies again.

    Repair the row first; a row that still does not verify is refused unless
    --accept-current is given.
    """
    with cli.connect() as conn:
        outcome = admin.retry(conn, message_id, accept_current=accept_current)
    how = "accepted as it is and " if outcome == "accepted" else ""
    click.echo(f"message {message_id} {how}returned to pending")


@click.command("prune")
@click.argument("days", type=click.IntRange(min=0))
@click.argument("limit", type=click.IntRange(min=1), default=1000)
@pass_cli
def prune_command(cli: CliContext, days: int, limit: int) -> None:
    """Delete at most LIMIT (default 1000) published tombstones older than DAYS days.

    Oldest first, in small batches so no lock is held for long; `prune 0` takes all
    published so far. Pending and failed intents are never pruned. Pruning ends
    deduplication for those keys: recording one of them again creates a new job.
    """
    with cli.connect() as conn:
        if sys.stderr.isatty():
            with click.progressbar(length=limit, label="pruning", file=sys.stderr) as bar:
                deleted = admin.prune(conn, days, limit, progress=bar.update)
        else:
            deleted = admin.prune(conn, days, limit)
    click.echo(f"pruned {deleted} published tombstones older than {days} days")


commands: list[click.Command] = [
    relay_command,
    status_command,
    failed_command,
    retry_command,
    prune_command,
]
