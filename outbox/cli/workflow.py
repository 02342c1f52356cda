"""``outbox workflow show ID`` / ``outbox workflow cancel ID`` (``outbox.workflows``).

``show`` prints each node's state (waiting, due, running, succeeded, dead, skipped), its
attempts and times, and the class of the exception that dead-lettered it, or for a job
waiting to retry its last error class and the retry's due time (as ``outbox queue jobs``):
never a payload, never an exception's message (``outbox queue failed`` is where those are).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click
import orjson

from outbox import workflows
from outbox.cli.context import CliContext, pass_cli
from outbox.cli.params import MESSAGE_ID
from outbox.errors import OutboxError


def _at(d: datetime | None) -> str | None:
    return None if d is None else d.isoformat(timespec="milliseconds")


def as_dict(wf: workflows.WorkflowState) -> dict[str, Any]:
    """The workflow as `show --json` prints it."""
    return {
        "workflow_id": wf.workflow_id,
        "name": wf.name,
        "state": wf.state,
        "created_at": _at(wf.created_at),
        "nodes": [
            {
                "name": n.name,
                "node_id": n.node_id,
                "job": n.job_name,
                "queue": n.queue,
                "state": n.state,
                "attempts": n.attempts,
                "after": n.after,
                "on_failure": n.on_failure,
                "due_at": _at(n.due_at),
                "started_at": _at(n.started_at),
                "finished_at": _at(n.finished_at),
                "error": n.error,
            }
            for n in wf.nodes
        ],
    }


def _short(d: datetime | None) -> str:
    return "-" if d is None else d.strftime("%H:%M:%S.%f")[:-3]


@click.group("workflow")
def workflow_group() -> None:
    """Workflows: graphs of jobs recorded with record(conn, key, Workflow(...))."""


@workflow_group.command("show")
@click.argument("workflow_id", type=MESSAGE_ID, metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_cli
def show_command(cli: CliContext, workflow_id: str, as_json: bool) -> None:
    """Each node of workflow ID: state, attempts, times (UTC) and, for a dead node, the
    exception's class; for a node waiting to retry, the retry's due time and the last
    error's class. Exit 1 when there is no such workflow."""
    with cli.connect() as conn:
        found = workflows.get(conn, workflow_id)
    if found is None:
        raise OutboxError(f"no workflow {workflow_id} (never recorded, or pruned)")
    if as_json:
        click.echo(orjson.dumps(as_dict(found)).decode())
        return
    done = sum(n.state in (workflows.SUCCEEDED, workflows.DEAD, workflows.SKIPPED)
               for n in found.nodes)
    click.echo(f"workflow {found.workflow_id} {found.name}: {found.state}, "
               f"{done}/{len(found.nodes)} nodes finished")
    width = max(len(n.name) for n in found.nodes)
    click.echo(f"{'node':<{width}}  {'state':<9}  attempts  {'due':<12}  {'started':<12}  "
               f"{'finished':<12}  error")
    for n in found.nodes:
        click.echo(
            f"{n.name:<{width}}  {n.state:<9}  {n.attempts:>8}  {_short(n.due_at):<12}  "
            f"{_short(n.started_at):<12}  {_short(n.finished_at):<12}  {n.error or ''}"
        )


@workflow_group.command("cancel")
@click.argument("workflow_id", type=MESSAGE_ID, metavar="ID")
@pass_cli
def cancel_command(cli: CliContext, workflow_id: str) -> None:
    """Cancel every node of workflow ID that has not finished: waiting nodes and queued
    jobs become dead letters with exception class "cancelled", running ones when their
    handler returns. No confirmation: `outbox queue retry` runs a node again."""
    with cli.connect() as conn:
        due = workflows.cancel(conn, workflow_id)
    if due is None:
        raise OutboxError(f"no workflow {workflow_id} (never recorded, or pruned)")
    click.echo(f"cancelled workflow {workflow_id} ({due} nodes were queued or running)")


commands: list[click.Command] = [workflow_group]
