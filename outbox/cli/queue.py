"""``outbox worker``, ``outbox queue ...`` and ``outbox demo``.

Listings show ids, names, queues, attempts, times and exception classes; never payloads
or exception messages (``queue failed --show ID`` prints one dead letter's message and
traceback, for the operator who asks). ``forget``, ``remove`` and ``clear`` ask first
unless ``--yes``, and refuse when standard input cannot answer.

The worker and its metrics server are imported inside ``worker``, the workflows inside
``queue retry``: each ``outbox`` process is a fresh interpreter, and ``outbox queue
stats`` should not pay for them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click
import orjson

from outbox import status
from outbox.cli import broker as cli_broker
from outbox.cli import keys, preflight, prompt, tables
from outbox.cli.app import load_registry
from outbox.cli.context import CliContext, pass_cli
from outbox.cli.params import MESSAGE_ID, MESSAGE_ID_OR_ALL, QUEUE_NAME, Seconds
from outbox.cli.serving import metrics_options
from outbox.db.connection import Connection
from outbox.db.rows import job_state, own_due_ms
from outbox.errors import MessageNotFound, OutboxError
from outbox.hooks import NO_HOOKS
from outbox.job import NAME_PATTERN
from outbox.queue import admin, control
from outbox.queue.registry import DEFAULT_MAX_ATTEMPTS

# Jobs one worker process runs at once, over all its queues: each sync slot is a thread,
# and past this a process stalls starting them; run more worker processes instead.
MAX_CONCURRENCY = 1000


def parse_queues(specs: tuple[str, ...]) -> dict[str, int | None]:
    """``search=8 mail`` → ``{"search": 8, "mail": None}``; a bad one is a usage error."""
    out: dict[str, int | None] = {}
    for spec in specs or ("default",):
        name, sep, cap = spec.partition("=")
        if not NAME_PATTERN.fullmatch(name):
            raise click.BadParameter(
                f"{name!r} is not a queue name (1-200 chars of A-Z a-z 0-9 _ . : -)",
                param_hint="QUEUE",
            )
        if sep and not (cap.isdigit() and 1 <= int(cap) <= MAX_CONCURRENCY):
            raise click.BadParameter(
                f"{spec!r}: the cap after '=' must be a whole number from 1 to "
                f"{MAX_CONCURRENCY}",
                param_hint="QUEUE",
            )
        if name in out:
            raise click.BadParameter(f"queue {name!r} is given twice", param_hint="QUEUE")
        out[name] = int(cap) if sep else None
    return out


def parse_queue_limits(specs: tuple[str, ...]) -> dict[str, int]:
    """``("mail=4",)`` → ``{"mail": 4}``; a bad one is a usage error."""
    out: dict[str, int] = {}
    for spec in specs:
        name, sep, n = spec.partition("=")
        if not NAME_PATTERN.fullmatch(name):
            raise click.BadParameter(
                f"{name!r} is not a queue name (1-200 chars of A-Z a-z 0-9 _ . : -)",
                param_hint="--queue-concurrency",
            )
        if not (sep and n.isdigit() and int(n) >= 1):
            raise click.BadParameter(
                f"{spec!r}: write QUEUE=N with N a whole number >= 1",
                param_hint="--queue-concurrency",
            )
        if name in out:
            raise click.BadParameter(
                f"queue {name!r} is given twice", param_hint="--queue-concurrency"
            )
        out[name] = int(n)
    return out


@click.command("worker")
@click.argument("queues", nargs=-1, metavar="QUEUE[=CAP]...")
@click.option(
    "--app",
    required=True,
    metavar="MODULE:ATTR",
    help="The Registry to run, e.g. myapp.jobs:registry.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, MAX_CONCURRENCY),
    default=1,
    help=f"Jobs run at once in each queue given without =CAP; at most {MAX_CONCURRENCY} "
    "in all queues together (run more workers for more).",
)
@click.option(
    "--unknown-job-delay",
    type=Seconds(0, 86_400),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="A claimed job no handler here knows (another worker's registry) goes back, "
    "attempt refunded, due again after this long, for a worker that knows it.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(1),
    default=None,
    help="Jobs claimed ahead of those running, per queue. Default: adaptive (up to 500 "
    "while handlers are quick, one per slot when they are slow).",
)
@click.option(
    "--lease",
    type=click.FloatRange(0.3),
    default=30.0,
    help="Seconds a claim lasts without a heartbeat; renewed every third of it while a job "
    "runs, so a crashed worker's jobs come back after at most this long.",
)
@click.option(
    "--sleep",
    type=click.FloatRange(0.001),
    default=1.0,
    help="Seconds between polls while idle (PostgreSQL also wakes at once on NOTIFY).",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    help="Seconds running jobs get to finish after SIGTERM/SIGINT; the ones still running "
    "then go back to the queue, their attempt counted, and the worker exits 1.",
)
@click.option(
    "--max-jobs",
    type=click.IntRange(1),
    metavar="N",
    help="Stop claiming after N jobs, finish them, exit. Default: no limit.",
)
@click.option(
    "--max-time",
    type=click.FloatRange(0.001),
    metavar="SECONDS",
    help="Stop claiming after SECONDS, finish what runs, exit. Default: no limit.",
)
@click.option(
    "--stop-when-empty",
    is_flag=True,
    help="Exit when nothing is claimable now (delayed jobs do not keep it running).",
)
@click.option("--once", is_flag=True, help="Run at most one job, then exit.")
@cli_broker.broker_option(
    "Take jobs from NATS JetStream (nats://host:4222[,...]) instead of the SQL queue; "
    "--lease is then the consumer's ack wait. Default: the SQL queue."
)
@click.option(
    "--queue-concurrency",
    "queue_limits",
    multiple=True,
    metavar="QUEUE=N",
    help="At most N jobs of QUEUE run at once across every worker and host (held in the "
    "database; a crashed worker's slots come back when its leases expire). Repeat for "
    "more queues. Default: no global limit.",
)
@metrics_options()
@pass_cli
def worker_command(
    cli: CliContext,
    queues: tuple[str, ...],
    app: str,
    concurrency: int,
    unknown_job_delay: float,
    prefetch: int | None,
    lease: float,
    sleep: float,
    grace: float,
    max_jobs: int | None,
    max_time: float | None,
    stop_when_empty: bool,
    once: bool,
    broker: str | None,
    queue_limits: tuple[str, ...],
    metrics_port: int | None,
    metrics_bind: str,
) -> None:
    """Run the jobs of the queues named (default: "default") until stopped.

    QUEUE=CAP caps one queue in this worker: "search=8" runs at most 8 of its jobs at
    once here; --queue-concurrency search=8 caps it across every worker.
    Before it starts, the database must have the outbox tables (else: exit 1, saying to
    run `outbox migrate`); a database that is down is waited for. SIGTERM/SIGINT stop
    gracefully: no new claims, unstarted jobs go back without spending an attempt,
    running jobs get --grace seconds. A second signal stops at once.
    """
    served = parse_queues(queues)
    limits = parse_queue_limits(queue_limits)
    for name in limits.keys() - served.keys():
        raise click.BadParameter(
            f"queue {name!r} is not one this worker runs ({', '.join(served)})",
            param_hint="--queue-concurrency",
        )
    slots = sum(concurrency if cap is None else cap for cap in served.values())
    if slots > MAX_CONCURRENCY:
        raise click.BadParameter(
            f"{slots} jobs at once over these queues; one worker runs at most "
            f"{MAX_CONCURRENCY} (run more worker processes)",
            param_hint="--concurrency",
        )
    from outbox.metrics import serving
    from outbox.queue.worker import Worker, WorkerConfig

    registry = load_registry(app)
    config = WorkerConfig(
        queues=served,
        concurrency=concurrency,
        prefetch=1 if once else prefetch,
        lease=lease,
        sleep=sleep,
        grace=grace,
        max_jobs=1 if once else max_jobs,
        max_time=max_time,
        stop_when_empty=stop_when_empty or once,
        queue_limits=limits,
        unknown_job_delay=unknown_job_delay,
    )
    url = cli_broker.broker_url(broker, "--broker")
    if url is not None:
        cli_broker.run_worker(cli, url, registry, config, metrics_port, metrics_bind)
        return
    database = cli.database()
    with preflight.stop_on_signals() as stop:
        try:
            preflight.ready(database, wait=True, stop=stop)
        except preflight.Stopped:
            return
    queue_names = list(config.queues)
    with serving(
        database, "worker", metrics_port, metrics_bind, queues=queue_names, jobs=registry
    ) as m:
        worker = Worker(database, registry, config, hooks=m or NO_HOOKS)
        if m is not None:
            m.watch_worker(worker)
        with worker.signals_handled():
            stats = worker.run()
    if not stats.graceful:
        sys.exit(1)


@click.group("queue")
def queue_group() -> None:
    """Inspect and manage the job queue and its dead letters.

    A dead letter is a job that used up its attempts or failed permanently: it left the
    queue for outbox_failed_jobs. (Intents the relay refused are quarantined instead:
    `outbox failed`.)
    """


LIMIT = click.IntRange(1, admin.MAX_LIMIT)
TRIES_NOTE = (
    f"TRIES: attempts made / max_attempts; '-' means the handler's max_attempts "
    f"(default {DEFAULT_MAX_ATTEMPTS})."
)


@queue_group.command("jobs")
@click.argument("limit", type=LIMIT, default=50)
@click.option(
    "--queue", "queue_name", type=QUEUE_NAME, help="Only this queue. Default: every queue."
)
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def jobs_command(cli: CliContext, limit: int, queue_name: str | None, broker: str | None) -> None:
    """List up to LIMIT (default 50) jobs in the queue, oldest first; no payloads.

    STATE is ready (due), delayed (due later), waiting (for its ordering key's turn; DUE
    is its own due time) or reserved (a worker holds it until LEASE_ENDS). PRIORITY runs
    from 0 (most urgent) to 9. Times are UTC. With --broker the columns are those the
    broker keeps, and the last says where the job is: SEQ (its JetStream stream sequence)
    or ENTRY (its Redis stream entry id; "-" while it waits in the delayed set).
    """
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().jobs(url, queue_name, limit)
        return
    with cli.connect() as conn:
        rows = admin.jobs(conn, queue=queue_name, limit=limit)
        now = conn.driver.clock_now()
    cells = []
    for r in rows:
        state = job_state(r.reserved_by, r.available_at, now)
        cells.append(
            [
                r.message_id,
                r.queue,
                r.job_name,
                state,
                r.priority,
                f"{r.attempts}/{r.max_attempts or tables.NONE}",
                tables.utc(own_due_ms(r.available_at)),
                tables.utc(r.lease_expires_at if r.reserved_by else None),
                r.last_error or tables.NONE,
            ]
        )
    headers = [
        "MESSAGE_ID", "QUEUE", "JOB", "STATE", "PRIORITY", "TRIES", "DUE", "LEASE_ENDS",
        "LAST_ERROR",
    ]
    tables.echo_table(headers, cells, nothing="no jobs in the queue", right={4, 5})
    if rows:
        click.echo(tables.shown(len(rows), limit))
        if any(r.max_attempts is None for r in rows):
            click.echo(TRIES_NOTE)


@queue_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def stats_command(cli: CliContext, as_json: bool, broker: str | None) -> None:
    """Ready, delayed, reserved jobs and dead letters per queue, the age of the oldest
    ready job, and STATE: "paused" (`outbox queue pause`) or "active". --json keeps the
    older key "dead" (= "dead_letters") and gives "paused" as true/false."""
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().stats(url, as_json)
        return
    with cli.connect() as conn:
        counts = status.queue_counts(conn)
        now = conn.driver.clock_now()

    def oldest(c: status.QueueCounts) -> float | None:
        if c.oldest_ready_ms is None:
            return None
        return round(max(0, now - c.oldest_ready_ms) / 1000, 3)

    if as_json:
        data = {
            c.queue: {
                "ready": c.ready,
                "delayed": c.delayed,
                "reserved": c.reserved,
                "dead": c.dead,
                "dead_letters": c.dead,
                "oldest_ready_age_s": oldest(c),
                "paused": c.paused,
            }
            for c in counts
        }
        click.echo(orjson.dumps({"queues": data}).decode())
        return
    tables.echo_table(
        ["QUEUE", "READY", "DELAYED", "RESERVED", "DEAD_LETTERS", "OLDEST_READY_AGE", "STATE"],
        [
            [
                c.queue,
                c.ready,
                c.delayed,
                c.reserved,
                c.dead,
                tables.age(oldest(c)),
                tables.queue_state(c.paused),
            ]
            for c in counts
        ],
        nothing="no queues",
        right={1, 2, 3, 4},
    )


@queue_group.command("failed")
@click.argument("limit", type=LIMIT, default=50)
@click.option(
    "--show",
    "show_id",
    type=MESSAGE_ID,
    help="Print this one dead letter's exception message and traceback instead of the list.",
)
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def failed_command(cli: CliContext, limit: int, show_id: str | None, broker: str | None) -> None:
    """List up to LIMIT (default 50) dead letters, newest first: exception class only.

    --show ID prints one dead letter's message and traceback, for the operator who asks.
    Requeue with `outbox queue retry ID|all`, delete with `outbox queue forget ID`.
    """
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().failed(url, limit, show_id)
        return
    with cli.connect() as conn:
        if show_id is not None:
            detail = admin.failed_job(conn, show_id)
            if detail is None:
                raise MessageNotFound(f"no dead letter with message id {show_id}")
            _echo_detail(detail)
            return
        rows = admin.failed(conn, limit=limit)
    tables.echo_dead_letters(
        [
            (r.message_id, r.queue, r.job_name, r.attempts, r.failed_at, r.exception_class)
            for r in rows
        ],
        limit,
        nothing="no dead letters",
    )


def _echo_detail(d: admin.FailedDetail) -> None:
    click.echo(f"MESSAGE_ID:  {d.message_id}")
    click.echo(f"QUEUE:       {d.queue}")
    click.echo(f"JOB:         {d.job_name}")
    click.echo(f"TRIES:       {d.attempts}/{d.max_attempts or tables.NONE}")
    click.echo(f"DEAD_AT:     {tables.utc(d.failed_at)}")
    keys.echo_failure(d.exception_class, d.exception_message, d.exception_trace, d.payload)



@queue_group.command("retry")
@click.argument("target", type=MESSAGE_ID_OR_ALL, metavar="ID|all")
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def retry_command(cli: CliContext, target: str, broker: str | None) -> None:
    """Put a dead letter (or all of them) back in the queue with attempts reset to 0.

    With --broker the job is re-published under a new Nats-Msg-Id (the old one would be
    dropped as a duplicate) and keeps its message id.
    """
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().retry(url, target)
        return
    from outbox import workflows

    with cli.connect() as conn:
        if target == "all":
            n = admin.retry_all(conn)
        else:
            n = admin.retry(conn, target)
            if n == 0 and (skipped := workflows.why_not_retried(conn, target)):
                raise OutboxError(skipped)
            if n == 0:
                raise MessageNotFound(f"no dead letter with message id {target}")
    click.echo(f"requeued {n} job(s)")


YES = click.option(
    "--yes", is_flag=True, help="Do not ask for confirmation (needed without a terminal)."
)


def _delete_one(
    cli: CliContext,
    message_id: str,
    yes: bool,
    delete: Callable[[Connection, str], int],
    *,
    question: str,
    missing: str,
    done: str,
) -> None:
    """Ask unless ``--yes``, delete one row; a missing row is an error."""
    with cli.connect() as conn:
        prompt.confirm(yes, question)
        if delete(conn, message_id) == 0:
            raise MessageNotFound(missing)
    click.echo(done)


@queue_group.command("forget")
@click.argument("message_id", type=MESSAGE_ID, metavar="ID")
@YES
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def forget_command(cli: CliContext, message_id: str, yes: bool, broker: str | None) -> None:
    """Delete one dead letter for good."""
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().forget(url, message_id, yes)
        return
    _delete_one(
        cli,
        message_id,
        yes,
        admin.forget,
        question=f"Delete dead letter {message_id} for good?",
        missing=f"no dead letter with message id {message_id}",
        done=f"forgot {message_id}",
    )


@queue_group.command("remove")
@click.argument("message_id", type=MESSAGE_ID, metavar="ID")
@YES
@pass_cli
def remove_command(cli: CliContext, message_id: str, yes: bool) -> None:
    """Remove one job from the queue (it will not run)."""
    _delete_one(
        cli,
        message_id,
        yes,
        admin.remove,
        question=f"Remove job {message_id} from the queue? It will not run.",
        missing=f"no job with message id {message_id} in the queue",
        done=f"removed {message_id}",
    )


@queue_group.command("clear")
@click.option(
    "--queue", "queue_name", type=QUEUE_NAME, help="Only this queue. Default: every queue."
)
@YES
@pass_cli
def clear_command(cli: CliContext, queue_name: str | None, yes: bool) -> None:
    """Remove every job no worker holds (of one queue, or all). They will not run."""
    where = f"queue {queue_name!r}" if queue_name else "every queue"
    with cli.connect() as conn:
        prompt.confirm(yes, f"Remove all waiting jobs of {where}? They will not run.")
        n = admin.clear(conn, queue=queue_name)
    click.echo(f"removed {n} job(s) from {where}")


@queue_group.command("pause")
@click.argument("queue_name", type=QUEUE_NAME, metavar="QUEUE")
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def pause_command(cli: CliContext, queue_name: str, broker: str | None) -> None:
    """Pause QUEUE: no worker claims from it until `outbox queue resume QUEUE`.

    Pushes and handoffs still add jobs to it, and jobs already claimed run to their end.
    A queue with no jobs yet can be paused. Pausing a paused queue changes nothing.
    """
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().pause(url, queue_name)
        return
    with cli.connect() as conn:
        changed = control.pause(conn, queue_name)
        empty = conn.driver.queue_job_count(queue_name) == 0
    if not changed:  # the same words as with --broker (outbox.cli.queue_broker)
        click.echo(f"queue {queue_name} was paused already")
        return
    if empty:  # a typo pauses nothing that exists; say so rather than look like success
        click.echo(
            f"paused queue {queue_name}; it has no jobs now (a new queue, or a mistyped "
            "name?): jobs that arrive in it wait until it is resumed"
        )
        return
    click.echo(f"paused queue {queue_name}")


@queue_group.command("resume")
@click.argument("queue_name", type=QUEUE_NAME, metavar="QUEUE")
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def resume_command(cli: CliContext, queue_name: str, broker: str | None) -> None:
    """Resume QUEUE: workers claim from it again (at once on PostgreSQL, else within
    their --sleep). Resuming a queue that is not paused changes nothing."""
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().resume(url, queue_name)
        return
    with cli.connect() as conn:
        resumed = control.resume(conn, queue_name)
    click.echo(f"resumed queue {queue_name}" if resumed else f"queue {queue_name} was not paused")


@queue_group.command("cancel")
@click.argument("message_id", type=MESSAGE_ID, metavar="ID")
@cli_broker.broker_option(cli_broker.QUEUE_BROKER_HELP)
@pass_cli
def cancel_command(cli: CliContext, message_id: str, broker: str | None) -> None:
    """Cancel one job; it becomes a dead letter with exception class "cancelled".

    A waiting job goes at once. A running job is flagged: its handler sees
    ctx.cancelled (an async handler is cancelled) within a third of the lease (on
    --broker nats:// at once), and its worker records the cancellation when it returns.
    No confirmation: the dead letter keeps the job (`outbox queue retry ID` runs it
    again).
    """
    if (url := cli_broker.broker_url(broker, "--broker")) is not None:
        cli_broker.queue_admin().cancel(url, message_id)
        return
    with cli.connect() as conn:
        how = control.cancel(conn, message_id)
    if how == "dead":
        click.echo(f"cancelled {message_id} (moved to the dead letters)")
    else:
        click.echo(
            f"cancelling {message_id}: a worker is running it; it will be recorded as cancelled"
        )


@click.command("demo")
@click.option(
    "--intents",
    type=click.IntRange(10, 5000),
    default=300,
    help="Simulated application transactions to run.",
)
@pass_cli
def demo_command(cli: CliContext, intents: int) -> None:
    """See the whole product work: record, relay, run, retry, dead-letter.

    Runs on --database-url when given (default: sqlite:///outbox.db in the current
    folder; the tables are created if missing), in a queue of its own. Some jobs are set
    to fail once and one always fails, to show retries and a dead letter.
    """
    from outbox import log
    from outbox.demo import run_demo

    if cli.log_level == "info":  # the summary tells the story; per-retry warnings would bury it
        log.configure("auto", "error")
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from outbox.db.errors import translate

    database = cli.database()
    preflight.check_sqlite_folder(database)
    try:
        run_demo(database, intents=intents, echo=click.echo)
    except SQLAlchemyError as exc:  # the demo's own business writes (a read-only file, ...)
        orig = exc.orig if isinstance(exc, DBAPIError) else None
        cause: BaseException = orig if orig is not None else exc
        raise translate(cause, f"demo on {database.describe()}") from exc


commands: list[click.Command] = [worker_command, queue_group, demo_command]
