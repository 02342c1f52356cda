"""``outbox relay``, ``status``, ``failed``, ``retry`` and ``prune``.

Thin: each command parses its arguments, calls ``outbox.relay`` and prints a summary.
Output carries ids, counts, reason codes and times; never a payload or an exception
message. Progress bars go to stderr, and only when it is a terminal.

What only one command uses (the metrics server, the relay's admin, workflows, the
queue's bookkeeping) is imported inside it: each ``outbox`` process is a fresh
interpreter, and ``outbox status`` should not pay for ``prune``'s imports.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import click
import orjson

from outbox import log
from outbox import status as outbox_status
from outbox.cli import broker, keys, preflight, redis_target, tables
from outbox.cli.context import CliContext, pass_cli
from outbox.cli.params import MESSAGE_ID
from outbox.cli.serving import metrics_options
from outbox.config import settings
from outbox.hooks import NO_HOOKS
from outbox.relay import Relay, RelayConfig
from outbox.relay.service import MAX_BATCH_SIZE

if TYPE_CHECKING:
    from outbox.relay import RunTotals

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
@click.option(
    "--watch",
    is_flag=True,
    help="Keep relaying until SIGTERM/SIGINT; waits for a database that is down.",
)
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
@broker.target_options
@metrics_options()
@pass_cli
def relay_command(
    cli: CliContext,
    limit: int | None,
    batch_size: int,
    watch: bool,
    fail_on_quarantine: bool,
    poll_only: bool,
    poll_interval: float,
    target: str,
    provisioning: str,
    duplicate_window: float,
    stream_max_msgs: int,
    stream_max_bytes: int,
    replicas: int,
    publish_timeout: float,
    in_flight: int,
    metrics_port: int | None,
    metrics_bind: str,
) -> None:
    """Move committed intents into the queue: up to LIMIT (default: all pending), then exit.

    --target nats://... hands them to NATS JetStream instead: one work-queue stream per
    queue, each message published with Nats-Msg-Id = its message id and deleted from the
    outbox only after its PubAck (exactly once into the stream within the duplicate
    window, at least once beyond it). A full stream makes the relay back off; the intents
    stay pending. --target redis://host:6379/0 hands them to Redis Streams the same way
    (a seen marker per message id, ?wait=N for replicas: docs/how-to/redis.md).

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
    database = cli.database()
    make = redis_target.make_target if redis_target.is_redis_url(target) else broker.make_target
    jet = make(
        target, provisioning, duplicate_window, stream_max_msgs, stream_max_bytes, replicas,
        publish_timeout, in_flight, config.reconnect_max,
    )
    if not watch:
        preflight.ready(database)
        with Relay(database, config, target=jet) as relay:
            totals = _drain(relay, limit)
    else:
        with preflight.stop_on_signals() as stop:
            try:
                preflight.ready(database, wait=True, stop=stop)
            except preflight.Stopped:
                click.echo("stopped while waiting for the database; nothing relayed")
                return
            from outbox.metrics import serving

            with serving(database, "relay", metrics_port, metrics_bind) as m, Relay(
                database, config, target=jet, hooks=m or NO_HOOKS
            ) as relay:
                totals = relay.watch(stop)
    click.echo(_summary(totals))
    if fail_on_quarantine and totals.quarantined:
        click.echo(f"quarantined {totals.quarantined} intents: see `outbox failed`", err=True)
        sys.exit(EXIT_THRESHOLD)


def _drain(relay: Relay, limit: int | None) -> RunTotals:
    if not sys.stderr.isatty():
        return relay.run(limit)
    with relay.database.connect() as conn:
        total = outbox_status.pending_count(conn)
    length = total if limit is None else min(limit, total)
    bar = click.progressbar(length=length, label="relaying", file=sys.stderr)
    with bar, log.progress_bar(bar):
        return relay.run(limit, progress=lambda batch: bar.update(batch.claimed))


def _summary(totals: RunTotals) -> str:
    return (
        f"relayed {totals.claimed} intents: {totals.handed_off} handed off, "
        f"{totals.quarantined} quarantined, in {totals.batches} "
        f"{'batch' if totals.batches == 1 else 'batches'} "
        f"({totals.ms / 1000:.2f} s in transactions)"
    )


@click.command("status")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object instead of the tables."
)
@click.option(
    "--max-pending",
    type=click.IntRange(min=0),
    metavar="N",
    help="Exit 3 when more than N intents are pending. Default: no threshold.",
)
@click.option(
    "--max-age",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Exit 3 when the oldest pending intent is older than SECONDS. Default: no threshold.",
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
@click.option(
    "--target",
    metavar="URL",
    default=None,
    help="Also show the relay's NATS target (nats://host:4222[,...]): each queue stream's "
    "fill and whether it refuses new messages. Default: none.",
)
@pass_cli
def status_command(
    cli: CliContext,
    as_json: bool,
    max_pending: int | None,
    max_age: float | None,
    max_failed: int | None,
    max_dead: int | None,
    target: str | None,
) -> None:
    """Counts of intents and of jobs per queue; exit 3 past a threshold.

    Intents by state (pending, published, quarantined) and the oldest pending one's age;
    jobs per queue (ready, delayed, reserved, dead letters) and whether it is paused
    (STATE "paused"; "paused": true in --json); while a workflow runs, its nodes waiting
    for a dependency, which no queue counts until they are due. Exits 3 when --max-pending,
    --max-age, --max-failed or --max-dead is exceeded (for cron and health checks).
    --json prints one object whose shape is versioned by its "schema_version" key; it
    keeps the older keys "failed" (= "quarantined") and "dead" (= "dead_letters").
    """
    with cli.connect() as conn:
        status = outbox_status.status(conn)
    streams = broker.target_status(target)
    if as_json:
        data = status.as_dict()
        if streams is not None:
            data["target"] = broker.target_json(streams)
        click.echo(orjson.dumps(data).decode())
    else:
        _print_status(status)
        if streams is not None:
            broker.echo_target(streams)
    if status.outbox.unknown_state:
        click.echo(
            f"warning: {status.outbox.unknown_state} intents have a state other than "
            "pending/published/failed (quarantined); the relay will not touch them",
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


def _print_status(status: outbox_status.Status) -> None:
    o = status.outbox
    tables.echo_table(
        ["PENDING", "PUBLISHED", "QUARANTINED", "OLDEST_PENDING_AGE"],
        [[o.pending, o.published, o.failed, tables.age(o.oldest_pending_age_s)]],
        nothing="",
        right={0, 1, 2},
    )
    click.echo("")
    rows = [
        [name, q.ready, q.delayed, q.reserved, q.dead, tables.queue_state(q.paused)]
        for name, q in sorted(status.queues.items())
    ]
    tables.echo_table(
        ["QUEUE", "READY", "DELAYED", "RESERVED", "DEAD_LETTERS", "STATE"],
        rows,
        nothing="no queues",
        right={1, 2, 3, 4},
    )
    keys.echo_encryption(status.encryption)
    _print_ordering(status.ordering)
    if status.workflows.running:
        w = status.workflows
        click.echo("")
        nodes = "node waits" if w.waiting_nodes == 1 else "nodes wait"
        click.echo(f"workflows: {w.running} running, {w.waiting_nodes} {nodes} for a"
                   " dependency (in no queue until due)")  # fmt: skip


def _print_ordering(o: outbox_status.OrderingCounts) -> None:
    """Ordering keys, only when some job waits for its key or a dead letter holds one."""
    if not o.waiting and not o.held:
        return
    click.echo("")
    click.echo(f"ordering keys: {o.waiting} jobs wait their turn on {o.waiting_keys} keys"
               f" (counted as DELAYED); {len(o.held)} keys blocked by a dead letter")  # fmt: skip
    if o.held:
        tables.echo_table(
            ["BLOCKED_KEY", "DEAD_LETTER", "JOB", "QUEUE"],
            [[h.key, h.message_id, h.job_name, h.queue] for h in o.held],
            nothing="",
        )
        click.echo("unblock with `outbox queue retry ID` or `outbox queue forget ID`")


def _exceeded(
    o: outbox_status.OutboxCounts, max_pending: int | None, max_age: float | None
) -> list[str]:
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
    """List quarantined intents, oldest first: id, reason code, times (UTC).

    Up to LIMIT (default 50).
    Quarantined: the relay found the row did not verify, so it stays in the outbox and
    never ran. Payloads are never shown. Repair a row, then `outbox retry MESSAGE_ID`.
    (Jobs that ran and used up their attempts are dead letters: `outbox queue failed`.)
    """
    from outbox.relay import admin

    with cli.connect() as conn:
        rows = admin.failed(conn, limit)
    tables.echo_table(
        ["MESSAGE_ID", "REASON", "CREATED_AT", "QUARANTINED_AT"],
        [
            [
                r.message_id,
                r.reason or tables.NONE,
                tables.utc(r.created_at_ms),
                tables.utc(r.failed_at_ms),
            ]
            for r in rows
        ],
        nothing="no quarantined intents",
    )
    if rows:
        click.echo(tables.shown(len(rows), limit))


@click.command("retry")
@click.argument("message_id", type=MESSAGE_ID, metavar="MESSAGE_ID")
@click.option(
    "--accept-current",
    is_flag=True,
    help="Accept the row's current contents as they are: rewrite the payload canonically "
    "and recompute the fingerprint (a producer replaying the original job then conflicts).",
)
@pass_cli
def retry_command(cli: CliContext, message_id: str, accept_current: bool) -> None:
    """Return a quarantined intent to pending once it verifies again.

    Repair the row first. The payload is compared as canonical JSON, so spacing and key
    order do not matter (it is stored canonically again). A row that still does not
    verify is refused, saying what differs, unless --accept-current is given.
    """
    from outbox.relay import admin

    with cli.connect() as conn:
        outcome = admin.retry(conn, message_id, accept_current=accept_current)
    how = "accepted as it is and " if outcome == "accepted" else ""
    click.echo(f"message {message_id} {how}returned to pending")


class _NumbersCommand(click.Command):
    """Takes ``-1`` as a (refused) value, not an unknown option: ``prune -1`` should say
    DAYS must be >= 0. Only flags, so every other word is a value."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        numbers = [a for a in args if _NEGATIVE.fullmatch(a)]
        if not numbers or "--" in args:
            return super().parse_args(ctx, args)
        flags = [a for a in args if a not in numbers and a.startswith("-")]
        values = [a for a in args if a not in flags]
        return super().parse_args(ctx, [*flags, "--", *values])


_NEGATIVE = re.compile(r"-\d+")


@click.command("prune", cls=_NumbersCommand)
@click.argument("days", type=click.IntRange(min=0))
@click.argument("limit", type=click.IntRange(min=1), default=1000)
@pass_cli
def prune_command(cli: CliContext, days: int, limit: int) -> None:
    """Delete at most LIMIT (default 1000) keys of handed-off intents older than DAYS days.

    A key is what deduplicates record(): once its intent is handed off to the queue, the
    key stays until pruned, so recording it again is ignored. Oldest first, in small
    batches so no lock is held for long; `prune 0` takes every key handed off so far.
    The keys of pending and quarantined intents are never pruned. Pruning ends
    deduplication for those keys: recording one of them again creates a new job.
    It also deletes job results past their retention, broker inbox ids older than DAYS
    days (a day at least), finished workflows (no node waiting or due) recorded more
    than DAYS days ago, the dashboard chart's per-minute counts older than a day, and
    the global limits' bookkeeping of keys idle for over an hour.
    """
    from outbox import workflows
    from outbox.queue import limits, throughput
    from outbox.relay import admin

    with cli.connect() as conn:
        # Finished workflows first: a workflow's key row stays while the workflow does.
        flows = workflows.prune(conn, days * 86_400_000, batch=limit)
        if sys.stderr.isatty():
            bar = click.progressbar(length=limit, label="pruning", file=sys.stderr)
            with bar, log.progress_bar(bar):
                deleted = admin.prune(conn, days, limit, progress=bar.update)
        else:
            deleted = admin.prune(conn, days, limit)
        minutes = throughput.prune(conn.driver)
        keys = limits.prune(conn.driver)
    click.echo(f"pruned {deleted} keys of handed-off intents older than {days} days")
    if flows:
        click.echo(f"pruned {flows} finished workflows older than {days} days")
    if minutes:
        click.echo(f"pruned {minutes} per-minute chart rows older than a day")
    if keys:
        click.echo(f"pruned {keys} idle limit keys")


commands: list[click.Command] = [
    relay_command,
    status_command,
    failed_command,
    retry_command,
    prune_command,
]
