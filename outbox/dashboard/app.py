"""``create_app``: the dashboard as an ASGI app, to serve or to mount in your own service.

Headers on every answer keep the pages to themselves: a Content-Security-Policy that
allows only the dashboard's own script and style (no inline script, nothing from
another site, no framing), no caching, no referrer. ``allowed_hosts`` refuses other
Host headers (400), which stops a DNS-rebinding page from reading a loopback dashboard.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox.dashboard import actions, auth, pages
from outbox.dashboard import workflows as workflow_pages
from outbox.dashboard.backend import Backend
from outbox.dashboard.web import Dashboard, Problem, Settings, log
from outbox.db.connection import Database
from outbox.errors import ConfigurationError, DatabaseError, MessageNotFound, OutboxError
from outbox.queue.registry import Registry

SESSION_COOKIE = "outbox_dashboard"
SESSION_MAX_AGE_S = 8 * 3600
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
Handler = Callable[[Dashboard, Request], Awaitable[Response]]


def create_app(
    database_url: str,
    *,
    token: str | None = None,
    show_payloads: bool = False,
    refresh_s: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
    registry: Registry | None = None,
) -> Starlette:
    """The dashboard for the database at ``database_url``.

    - ``token``: the secret that allows actions (default None: read-only for everyone);
      at least 16 characters. ``outbox dashboard`` reads it from OUTBOX_DASHBOARD_TOKEN.
    - ``show_payloads``: show payloads and exception messages to signed-in operators
      (default False: never shown).
    - ``refresh_s``: how often the overview refreshes itself (default 5 s); counts are
      read at most once per this interval however many viewers there are.
    - ``allowed_hosts``: Host header names to answer (default None: any, for mounting
      behind your own checks; ``outbox dashboard`` passes the loopback names).
    - ``registry``: the application's ``Registry``, whose periodic jobs the Schedules
      page shows (default None: the page says how to give it; ``outbox dashboard --app``).

    Mount it with ``Mount("/outbox", app=create_app(url))``; links follow the mount.
    """
    token = auth.check_token(token)
    if not refresh_s >= 1:
        raise ConfigurationError("refresh_s must be at least 1 second")
    database = Database(database_url)
    backend = Backend(database, ttl_s=min(refresh_s, 2.0))
    settings = Settings(token, show_payloads, refresh_s, database.dialect.name, registry)
    dash = Dashboard(settings, backend)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> Any:
        yield
        backend.close()

    app = Starlette(
        routes=_routes(dash),
        middleware=_middleware(token, allowed_hosts),
        exception_handlers={Exception: _fallback(dash)},
        lifespan=lifespan,
    )
    app.state.dashboard = dash
    return app


def _routes(dash: Dashboard) -> list[Route | Mount]:
    def bind(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(dash, request)
            except Exception as exc:  # every known failure becomes a clear answer
                return _answer_failure(dash, request, exc)

        return endpoint

    get, post = ["GET", "HEAD"], ["POST"]
    return [
        Route("/", bind(pages.overview), methods=get),
        Route("/live", bind(pages.live), methods=get),
        Route("/api/status", bind(pages.api_status), methods=get),
        Route("/queues/{queue}", bind(pages.queue), methods=get),
        Route("/queues/{queue}/pause", bind(actions.pause_queue), methods=post),
        Route("/queues/{queue}/resume", bind(actions.resume_queue), methods=post),
        Route("/jobs/{message_id}", bind(pages.job), methods=get),
        Route("/dead-letters", bind(pages.dead_letters), methods=get),
        Route("/dead-letters/retry", bind(actions.retry_dead), methods=post),
        Route("/dead-letters/forget", bind(actions.forget_dead), methods=post),
        Route("/quarantined", bind(pages.quarantined), methods=get),
        Route("/quarantined/retry", bind(actions.retry_quarantined), methods=post),
        Route("/schedules", bind(pages.schedules), methods=get),
        Route("/workflows", bind(workflow_pages.workflow_list), methods=get),
        Route("/workflows/{workflow_id}", bind(workflow_pages.workflow), methods=get),
        Route("/login", bind(pages.login_page), methods=get),
        Route("/login", bind(actions.login), methods=post),
        Route("/logout", bind(actions.logout), methods=post),
        Mount("/static", StaticFiles(packages=[("outbox.dashboard", "static")]), name="static"),
    ]


def _answer_failure(dash: Dashboard, request: Request, exc: Exception) -> Response:
    if isinstance(exc, auth.Refused | Problem):
        return dash.answer(request, exc.status, exc.message)
    if isinstance(exc, MessageNotFound):
        return dash.answer(request, 404, str(exc))
    if isinstance(exc, DatabaseError):
        # Its message names the database; the page says only that it did not answer.
        cause = type(exc.__cause__ or exc).__name__  # its message may name the database
        log.warning("dashboard.database_error", operation=exc.operation, error=cause)
        return dash.answer(request, 503, "the database did not answer; see the dashboard's log")
    if isinstance(exc, ValueError | OutboxError):
        return dash.answer(request, 400, str(exc))
    raise exc


def _fallback(dash: Dashboard) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        log.error("dashboard.error", error=type(exc).__name__)
        return PlainTextResponse("internal error; see the dashboard's log", status_code=500)

    return handler


def _middleware(token: str | None, allowed_hosts: Iterable[str] | None) -> list[Middleware]:
    out = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        out.append(Middleware(HostGuard, allowed=frozenset(h.lower() for h in allowed_hosts)))
    out.append(
        Middleware(
            SessionMiddleware,
            secret_key=auth.session_secret(token),
            session_cookie=SESSION_COOKIE,
            max_age=SESSION_MAX_AGE_S,
            same_site="strict",
            https_only=False,
        )
    )
    return out


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostGuard:
    """Answers 400 to a Host header not in ``allowed`` (names without the port), unless
    it is an address of this machine: a page that rebinds its own name to us still sends
    that name, so an IP literal is never a rebinding, and one of ours reached us."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            name = host_name(scope)
            if name not in self.allowed and not is_own_address(name):
                answer = PlainTextResponse("unexpected Host header", status_code=400)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


@functools.lru_cache(maxsize=256)
def is_own_address(name: str) -> bool:
    """Is ``name`` an IP address of one of this machine's interfaces? (Only a local
    address can be bound, so binding a throwaway UDP socket to it says so.)"""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if address.is_unspecified or address.is_multicast:  # 0.0.0.0 binds, but names no host
        return False
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def own_names() -> frozenset[str]:
    """This machine's own host names, for a dashboard listening on every interface."""
    names = {socket.gethostname(), socket.getfqdn()}
    return frozenset(n.lower() for n in names if n)


def host_name(scope: Scope) -> str:
    """The Host header's name part: ``[::1]:8642`` → ``::1``, ``Example:80`` → ``example``."""
    headers: dict[bytes, bytes] = dict(scope.get("headers", []))
    raw = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if raw.startswith("["):
        return raw[1 : raw.find("]")] if "]" in raw else raw
    return raw.rsplit(":", 1)[0] if raw.count(":") == 1 else raw
