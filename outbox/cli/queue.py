"""``outbox worker``, ``outbox queue ...`` and ``outbox demo``.

Listings show ids, names, queues, attempts, times and exception classes; never payloads
or exception messages (``queue failed --show ID`` prints one dead letter's message and
traceback, for the operator who asks). ``forget``, ``remove`` and ``clear`` ask first
unless ``--yes``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime

import click
import orjson

from outbox.cli.context import CliContext, pass_cli
from outbox.cli.serving import metrics_options
from outbox.db.connection import Connection
from outbox.errors import MessageNotFound
from outbox.metrics import serving
from outbox.queue import admin
from outbox.queue.registry import Registry
from outbox.queue.worker import Worker, WorkerConfig


def load_registry(spec: str) -> Registry:
    """``MODULE:ATTR`` → the ``Registry`` it names (the current directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            "expected MODULE:ATTR, e.g. myapp.jobs:registry", param_hint="--app"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r} ({type(exc).__name__})", param_hint="--app"
        ) from exc
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise click.BadParameter(
            f"{spec!r} is not an outbox.Registry (got {type(registry).__name__})",
            param_hint="--app",
        )
    return registry


def parse_queues(specs: tuple[str, ...]) -> dict[str, int | None]:
    """``search=8 mail`` → ``{"search": 8, "mail": None}``."""
    out: dict[str, int | None] = {}
    for spec in specs or ("default",):
        name, sep, cap = spec.partition("=")
        if sep and not (cap.isdigit() and int(cap) >= 1):
            raise click.BadParameter(f"{spec!r}: the cap after '=' must be a whole number >= 1")
        if name in out:
            raise click.BadParameter(f"queue {name!r} is given twice")
        out[name] = int(cap) if sep else None
    return out


@click.command("worker")
@click.argument("queues", nargs=-1, metavar="QUEUE[=CAP]...")
@click.option("--app", envvar="OUTBOX_APP", required=True, help="MODULE:ATTR of a Registry.")
@click.option("--concurrency", type=click.IntRange(1), help="Cap of queues given without one.")
@click.option("--prefetch", type=click.IntRange(1), default=10, show_default=True)
@click.option("--lease", type=click.FloatRange(0.3), default=30.0, show_default=True)
@click.option("--sleep", type=click.FloatRange(0.001), default=1.0, show_default=True)
@click.option("--grace", type=click.FloatRange(0), default=30.0, show_default=True)
@click.option("--max-jobs", type=click.IntRange(1))
@click.option("--max-time", type=click.FloatRange(0.001))
@click.option("--stop-when-empty", is_flag=True, help="Exit when nothing is claimable now.")
@click.option("--once", is_flag=True, help="Run at most one job, then exit.")
@metrics_options("worker")
@pass_cli
def worker_command(
    cli: CliContext,
    queues: tuple[str, ...],
    app: str,
    concurrency: int | None,
    prefetch: int,
    lease: float,
    sleep: float,
    grace: float,
    max_jobs: int | None,
    max_time: float | None,
    stop_when_empty: bool,
    once: bool,
    metrics_port: int | None,
    metrics_bind: str,
) -> None:
    """Run jobs from QUEUE... (default: "default"); "search=8" caps that queue at 8.

    SIGTERM/SIGINT stop gracefully: no new claims, unstarted jobs go back without
    spending an attempt, running jobs get --grace seconds. A second signal stops at once.
    """
    registry = load_registry(app)
    config = WorkerConfig(
        queues=parse_queues(queues),
        concurrency=concurrency or 1,
        prefetch=1 if once else prefetch,
        lease=lease,
        sleep=sleep,
        grace=grace,
        max_jobs=1 if once else max_jobs,
        max_time=max_time,
        stop_when_empty=stop_when_empty or once,
    )
    worker = Worker(cli.database(), registry, config)
    queue_names = list(config.queues)
    with serving(worker.database, "worker", metrics_port, metrics_bind, queues=queue_names) as m:
        if m is not None:
            m.watch_worker(worker)
        with worker.signals_handled():
            stats = worker.run()
    if not stats.graceful:
        sys.exit(1)


@click.group("queue")
def queue_group() -> None:
    """Inspect and manage the job queue and its dead letters."""


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


@queue_group.command("jobs")
@click.argument("limit", type=int, default=50)
@click.option("--queue", "queue_name", help="Only this queue.")
@pass_cli
def jobs_command(cli: CliContext, limit: int, queue_name: str | None) -> None:
    """List jobs in the queue, oldest first (no payloads)."""
    with cli.connect() as conn:
        rows = admin.jobs(conn, queue=queue_name, limit=limit)
        now = admin.now_ms(conn)
    click.echo(
        f"{'message_id':36}  {'queue':12} {'job':24} {'tries':>5}  {'state':9} {'due':19}  "
        "last_error"
    )
    for r in rows:
        state = "reserved" if r.reserved_by else ("ready" if r.available_at <= now else "delayed")
        tries = f"{r.attempts}/{r.max_attempts or '-'}"
        click.echo(
            f"{r.message_id:36}  {r.queue:12} {r.job_name:24} {tries:>5}  {state:9} "
            f"{_time(r.available_at):19}  {r.last_error or '-'}"
        )
    click.echo(f"({len(rows)} shown)")


@queue_group.command("stats")
@click.option("--json", "as_json", is_flag=True)
@pass_cli
def stats_command(cli: CliContext, as_json: bool) -> None:
    """Ready, delayed, reserved and dead jobs per queue."""
    with cli.connect() as conn:
        counts = admin.stats(conn)
        now = admin.now_ms(conn)
    if as_json:
        data = {
            c.queue: {
                "ready": c.ready,
                "delayed": c.delayed,
                "reserved": c.reserved,
                "dead": c.dead,
                "oldest_ready_age_s": None
                if c.oldest_ready_ms is None
                else round(max(0, now - c.oldest_ready_ms) / 1000, 3),
            }
            for c in counts
        }
        click.echo(orjson.dumps({"queues": data}).decode())
        return
    click.echo(f"{'queue':20} {'ready':>8} {'delayed':>8} {'reserved':>8} {'dead':>8}")
    for c in counts:
        click.echo(f"{c.queue:20} {c.ready:>8} {c.delayed:>8} {c.reserved:>8} {c.dead:>8}")


@queue_group.command("failed")
@click.argument("limit", type=int, default=50)
@click.option(
    "--show", "show_id", metavar="ID", help="Print one dead letter's message and traceback."
)
@pass_cli
def failed_command(cli: CliContext, limit: int, show_id: str | None) -> None:
    """List dead letters, newest first (exception class only; --show ID for details)."""
    with cli.connect() as conn:
        if show_id is not None:
            detail = admin.failed_job(conn, show_id)
            if detail is None:
                raise MessageNotFound(f"no dead letter with message id {show_id}")
            _echo_detail(detail)
            return
        rows = admin.failed(conn, limit=limit)
    click.echo(
        f"{'message_id':36}  {'queue':12} {'job':24} {'tries':>5}  {'failed_at':19}  exception"
    )
    for r in rows:
        click.echo(
            f"{r.message_id:36}  {r.queue:12} {r.job_name:24} {r.attempts:>5}  "
            f"{_time(r.failed_at):19}  {r.exception_class}"
        )
    click.echo(f"({len(rows)} shown)")


def _echo_detail(d: admin.FailedDetail) -> None:
    click.echo(f"message_id: {d.message_id}")
    click.echo(f"queue:      {d.queue}")
    click.echo(f"job:        {d.job_name}")
    click.echo(f"attempts:   {d.attempts}/{d.max_attempts or '-'}")
    click.echo(f"failed_at:  {_time(d.failed_at)}")
    click.echo(f"exception:  {d.exception_class}: {d.exception_message or ''}")
    if d.exception_trace:
        click.echo("")
        click.echo(d.exception_trace.rstrip())


@queue_group.command("retry")
@click.argument("target", metavar="ID|all")
@pass_cli
def retry_command(cli: CliContext, target: str) -> None:
    """Put a dead letter (or all of them) back in the queue with attempts reset to 0."""
    with cli.connect() as conn:
        if target == "all":
            n = admin.retry_all(conn)
        else:
            n = admin.retry(conn, target)
            if n == 0:
                raise MessageNotFound(f"no dead letter with message id {target}")
    click.echo(f"requeued {n} job(s)")


def _confirm(yes: bool, question: str) -> None:
    if not yes:
        click.confirm(question, abort=True)


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
    """Check the id, ask unless ``--yes``, delete one row; a missing row is an error."""
    admin.check_message_id(message_id)
    _confirm(yes, question)
    with cli.connect() as conn:
        if delete(conn, message_id) == 0:
            raise MessageNotFound(missing)
    click.echo(done)


@queue_group.command("forget")
@click.argument("message_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def forget_command(cli: CliContext, message_id: str, yes: bool) -> None:
    """Delete one dead letter for good."""
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
@click.argument("message_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
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
@click.option("--queue", "queue_name", help="Only this queue.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_cli
def clear_command(cli: CliContext, queue_name: str | None, yes: bool) -> None:
    """Remove every job no worker holds (of one queue, or all). They will not run."""
    admin.check_queue(queue_name)
    where = f"queue {queue_name!r}" if queue_name else "every queue"
    _confirm(yes, f"Remove all waiting jobs of {where}? They will not run.")
    with cli.connect() as conn:
        n = admin.clear(conn, queue=queue_name)
    click.echo(f"removed {n} job(s) from {where}")


@click.command("demo")
@click.option("--intents", type=click.IntRange(10, 5000), default=300, show_default=True)
@pass_cli
def demo_command(cli: CliContext, intents: int) -> None:
    """See the whole product work: record, relay, run, retry, dead-letter; on SQLite."""
    from outbox import log
    from outbox.demo import run_demo

    if cli.log_level == "info":  # the summary tells the story; per-retry warnings would bury it
        log.configure("auto", "error")
    run_demo(cli.database(), intents=intents, echo=click.echo)


commands: list[click.Command] = [worker_command, queue_group, demo_command]
