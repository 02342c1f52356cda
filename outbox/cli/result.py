"""``outbox result ID``: one job's state and kept result (``outbox.results``)."""

from __future__ import annotations

from typing import Any

import click
import orjson

from outbox import results
from outbox.cli.context import CliContext, pass_cli
from outbox.errors import OutboxError
from outbox.ids import is_message_id

EXIT_UNKNOWN = 1


def _as_dict(r: results.JobResult) -> dict[str, Any]:
    def at(d: Any) -> str | None:
        return None if d is None else d.isoformat()

    return {
        "message_id": r.message_id,
        "job": r.job_name,
        "queue": r.queue,
        "status": r.status,
        "attempts": r.attempts,
        "enqueued_at": at(r.enqueued_at),
        "started_at": at(r.started_at),
        "finished_at": at(r.finished_at),
        "worker_ids": r.worker_ids,
        "return_value": r.return_value,
        "errors": [
            {"exception_class": e.exception_class, "traceback": e.traceback} for e in r.errors
        ],
    }


@click.command("result")
@click.argument("message_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_cli
def result_command(cli: CliContext, message_id: str, as_json: bool) -> None:
    """Show job MESSAGE_ID: READY, RUNNING, SUCCESSFUL or FAILED, with its return value
    or its errors' classes and tracebacks (for handlers with keep_result). Exit 1 when
    nothing is known of it."""
    if not is_message_id(message_id):
        raise click.BadParameter("not a message id (a UUID)", param_hint="MESSAGE_ID")
    with cli.connect() as conn:
        found = results.read(conn, message_id)
    if found is None:
        raise OutboxError(f"no job {message_id} is known (never queued, kept no result, or pruned)")
    data = _as_dict(found)
    if as_json:
        click.echo(orjson.dumps(data).decode())
        return
    for key in ("message_id", "job", "queue", "status", "attempts", "enqueued_at",
                "started_at", "finished_at"):
        click.echo(f"{key + ':':<13} {'' if data[key] is None else data[key]}")
    click.echo(f"{'workers:':<13} {', '.join(found.worker_ids)}")
    if found.status == results.SUCCESSFUL:
        click.echo(f"{'return:':<13} {orjson.dumps(found.return_value).decode()}")
    for error in found.errors:
        click.echo(f"{'error:':<13} {error.exception_class}")
        click.echo(error.traceback)


commands: list[click.Command] = [result_command]
