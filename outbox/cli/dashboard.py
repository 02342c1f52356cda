"""``outbox dashboard``: serve the web dashboard with uvicorn.

Loopback by default. Actions need OUTBOX_DASHBOARD_TOKEN, read from the environment only
(a command-line argument would show in ``ps``); without it the dashboard is read-only.
Everything is checked here, before the server starts.
"""

from __future__ import annotations

import ipaddress
import os
import socket

import click

from outbox.cli import preflight
from outbox.cli.app import load_registry
from outbox.cli.context import CliContext, pass_cli
from outbox.cli.params import Seconds
from outbox.db.connection import Database
from outbox.errors import ConfigurationError, DatabaseError

DEFAULT_BIND = "127.0.0.1:8642"



LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::")


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
    "--refresh",
    type=Seconds(1),
    default=5.0,
    show_default=True,
    help="Seconds between live updates of the overview.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host name to answer (loopback, the bind host, the machine's own "
    "addresses and, on 0.0.0.0 or ::, its host names always are); repeat for more; "
    "needed on 0.0.0.0 or :: with a token. Default: none.",
)
@click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    help="The Registry whose periodic jobs the Schedules page shows (the one your "
    "scheduler runs). Default: none; the page says how to give it.",
)
@pass_cli
def dashboard_command(
    cli: CliContext,
    bind: str,
    show_payloads: bool,
    refresh: float,
    allowed_hosts: tuple[str, ...],
    app: str | None,
) -> None:
    """Serve the web dashboard (read-only unless OUTBOX_DASHBOARD_TOKEN is set)."""
    host, port = parse_bind(bind)
    registry = load_registry(app) if app else None
    try:
        import uvicorn

        from outbox.dashboard import create_app
    except ImportError as exc:
        raise ConfigurationError(
            "the dashboard needs its extra: pip install 'outbox-relay[dashboard]'"
        ) from exc
    token = os.environ.get("OUTBOX_DASHBOARD_TOKEN") or None
    extra = {h for spec in allowed_hosts for h in spec.split()}
    asgi = create_app(
        cli.database_url,
        token=token,
        show_payloads=show_payloads,
        refresh_s=refresh,
        allowed_hosts=_host_names(host, extra, token),
        registry=registry,
    )
    database = cli.database()
    _check(database)
    listener = listen(host, port)  # before it is announced: a port in use is said as such
    mode = "actions need the token" if token else "read-only (no OUTBOX_DASHBOARD_TOKEN)"
    shown = f"[{host}]" if ":" in host else host
    dialect = database.dialect.name
    click.echo(f"outbox dashboard on http://{shown}:{port}/ for {dialect}: {mode}")
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who reaches it can "
            "read the counts and lists",
            err=True,
        )
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", access_log=False))
    server.run(sockets=[listener])


def _host_names(host: str, extra: set[str], token: str | None) -> set[str]:
    """The Host names to answer; the check holds on every bind (it is what stops a
    DNS-rebinding page). On every interface, that is the machine's own names (its
    addresses are always answered); with a token set, actions must not hinge on a
    guess, so the name operators use must be given."""
    from outbox.dashboard.app import own_names

    names = {*LOOPBACK_NAMES, *extra}
    if host not in WILDCARD_HOSTS:
        return names | {host.lower()}
    if token and not extra:
        raise click.UsageError(
            f"--bind {host} with OUTBOX_DASHBOARD_TOKEN set needs --allowed-host NAME: the "
            "name operators reach the dashboard by (its Host header)"
        )
    return names | own_names()


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT for uvicorn, or one line and exit 1 (a port in use, a
    name that does not resolve), as ``--metrics-port`` says it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}"
        ) from None
    return sock


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
