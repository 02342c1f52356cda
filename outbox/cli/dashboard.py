"""``outbox dashboard``: serve the web dashboard with uvicorn.

Loopback by default. Actions need OUTBOX_DASHBOARD_TOKEN, read from the environment only
(a command-line argument would show in ``ps``); without it the dashboard is read-only.
Everything is checked here, before the server starts.
"""

from __future__ import annotations

import ipaddress
import os

import click

from outbox.cli import preflight
from outbox.cli.app import load_registry
from outbox.cli.context import CliContext, pass_cli
from outbox.db.connection import Database
from outbox.errors import ConfigurationError, DatabaseError

DEFAULT_BIND = "127.0.0.1:8642"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8642`` for IPv6) → (host, port); ``BadParameter`` otherwise."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8642 or [::1]:8642)", param_hint="--bind"
        )
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("dashboard")
@click.option("--bind", default=DEFAULT_BIND, show_default=True, help="HOST:PORT to listen on.")
@click.option(
    "--show-payloads",
    is_flag=True,
    help="Show payloads and exception messages to signed-in operators (escaped).",
)
@click.option(
    "--refresh", type=click.FloatRange(1), default=5.0, show_default=True,
    help="Seconds between live updates of the overview.",
)
@click.option(
    "--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
    help="Another Host name to answer (the bind host and loopback names always are); "
    "repeat for more. Default: none.",
)
@click.option(
    "--app", default=None, metavar="MODULE:ATTR",
    help="The Registry whose periodic jobs the Schedules page shows (the one your "
    "scheduler runs). Default: none; the page says how to give it.",
)
@pass_cli
def dashboard_command(
    cli: CliContext, bind: str, show_payloads: bool, refresh: float,
    allowed_hosts: tuple[str, ...], app: str | None,
) -> None:
    """Serve the web dashboard (read-only unless OUTBOX_DASHBOARD_TOKEN is set)."""
    host, port = parse_bind(bind)
    registry = load_registry(app) if app else None
    try:
        import uvicorn

        from outbox.dashboard import create_app
    except ImportError as exc:
        raise ConfigurationError(
            "the dashboard needs its extra: pip install 'outbox[dashboard]'"
        ) from exc
    token = os.environ.get("OUTBOX_DASHBOARD_TOKEN") or None
    names = {*LOOPBACK_NAMES, host, *(h for spec in allowed_hosts for h in spec.split())}
    asgi = create_app(
        cli.database_url,
        token=token,
        show_payloads=show_payloads,
        refresh_s=refresh,
        allowed_hosts=None if host in ("0.0.0.0", "::") and not allowed_hosts else names,
        registry=registry,
    )
    database = cli.database()
    _check(database)
    mode = "actions need the token" if token else "read-only (no OUTBOX_DASHBOARD_TOKEN)"
    shown = f"[{host}]" if ":" in host else host
    dialect = database.dialect.name
    click.echo(f"outbox dashboard on http://{shown}:{port}/ for {dialect}: {mode}")
    if not is_loopback(host):
        click.echo(f"warning: listening on {host}, not loopback: anyone who reaches it can "
                   "read the counts and lists", err=True)
    uvicorn.run(asgi, host=host, port=port, log_level="warning", access_log=False)


def _check(database: Database) -> None:
    """A mistyped SQLite path, a database without the tables, a wrong password or a
    database that does not exist stops here (exit 1), as for every command. A database
    that is down does not: the pages answer 503 until it is back, and an operator may
    start the dashboard to watch it come back."""
    preflight.check_sqlite_file(database)
    try:
        conn = database.connect()
    except DatabaseError as exc:
        if not preflight.connect_failure(exc)[0]:
            raise
        return
    with conn:
        preflight.check_schema(conn, database)


commands: list[click.Command] = [dashboard_command]
