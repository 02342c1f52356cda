"""``outbox migrate``: create or upgrade the tables, or print their DDL."""

from __future__ import annotations

import click

from outbox.cli import preflight
from outbox.cli.context import CliContext, pass_cli
from outbox.db.dialect import DIALECTS
from outbox.db.migrate import LATEST, applied_versions, held_back, migrate, render_sql


@click.command("migrate")
@click.option(
    "--sql",
    "print_sql",
    is_flag=True,
    help="Only print the DDL (for a DBA to apply); the database is not touched.",
)
@click.option(
    "--dialect",
    type=click.Choice(sorted(DIALECTS)),
    help="With --sql: the dialect to print. Default: the database URL's.",
)
@pass_cli
def migrate_command(cli: CliContext, print_sql: bool, dialect: str | None) -> None:
    """Create or upgrade the outbox tables. Idempotent; safe to run from two processes.

    With `outbox demo`, the only command that creates a SQLite database file. The
    contract step, which drops what only schema-1 code needed, and the guard after it,
    which makes such code fail, are held back (and said so) while such code evidently
    still writes to the database; every other step is applied.
    """
    if dialect and not print_sql:
        raise click.UsageError("--dialect goes with --sql")
    if print_sql:
        click.echo(render_sql(DIALECTS[dialect] if dialect else cli.database().dialect), nl=False)
        return
    db = cli.database()
    preflight.check_sqlite_folder(db)
    with db.connect() as conn:
        applied = migrate(conn)
        at = max(applied_versions(conn), default=LATEST)
        why = held_back(conn)
    if applied:
        click.echo(f"migrated {db.describe()} to version {at} (applied {applied})")
    if why:  # not a failure: the expand steps are in, and a rolling upgrade goes on
        click.echo(why)
    if applied or why:
        return
    if at > LATEST:  # a newer release migrated it: fine mid-rollout, but say so
        click.echo(
            f"{db.describe()}: the database is at version {at}, newer than this release "
            f"({LATEST}); nothing to do"
        )
        return
    click.echo(f"{db.describe()} is up to date (version {LATEST})")


commands = [migrate_command]
