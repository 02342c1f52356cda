"""``outbox schema [JOB] --app MODULE:ATTR``: the JSON Schema of a typed job's payload
(``outbox.job.typed``), for the services on the other side of the queue; without JOB, the
typed jobs' names, one a line (what a docs build or a script walks). Importing the app
imports its payload types; a job without one is an error naming it."""

from __future__ import annotations

import click
import orjson

from outbox.cli.app import load_registry
from outbox.job import typed


@click.command("schema")
@click.argument("job", required=False)
@click.option("--app", "app", required=True, help="The application's registry, MODULE:ATTR.")
def schema_command(job: str | None, app: str) -> None:
    """Print the JSON Schema of JOB's payload type, or list the typed jobs.

    JOB's type is declared with outbox.job_type in the app's modules. Without JOB, the
    names of the app's typed jobs, one a line."""
    load_registry(app)
    if job is None:
        for name in sorted(typed.names()):
            click.echo(name)
        return
    spec = typed.by_name(job)
    if spec is None:
        known = ", ".join(sorted(typed.names())) or "none"
        raise click.BadParameter(
            f"job {job!r} has no payload type (typed jobs: {known})", param_hint="JOB"
        )
    click.echo(orjson.dumps(spec.schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


commands: list[click.Command] = [schema_command]
