"""What every page and action shares: settings, templates, forms and answers.

Browsers get HTML; scripts (a Bearer header, or no ``text/html`` in ``Accept``) get
JSON. Templates autoescape everything, so a stored ``<script>`` renders as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from outbox.dashboard import auth
from outbox.dashboard.backend import Backend
from outbox.dashboard.store import COUNT_CAP
from outbox.db.rows import job_state, own_due_ms, waits_for_turn
from outbox.log import get_logger
from outbox.queue.registry import Registry

MAX_FORM_BYTES = 64 * 1024
log = get_logger("outbox.dashboard")


class Problem(Exception):
    """A request we cannot serve as asked: ``status`` and a message naming what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Settings:
    """How the dashboard was started (see ``create_app`` for each field's default)."""

    token: str | None
    show_payloads: bool
    refresh_s: float
    dialect: str
    registry: Registry | None = None  # whose periodic jobs the Schedules page shows


def ms_time(ms: int | None) -> str:
    return "-" if ms is None else tick(datetime.fromtimestamp(ms / 1000, tz=UTC))


def duration(seconds: float | None) -> str:
    """``3d 4h``, ``5m 02s``, ``12.4s``: the two largest units an operator reads at a glance."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    whole = int(s)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s"


def tick(at: datetime | None, ms: bool = False) -> str:
    """A time as every page shows it: UTC, to the second (``ms``: to the millisecond, as
    a workflow's nodes need); blank for none."""
    if at is None:
        return ""
    text = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return text[:-3] if ms else text[:-7]


def number(n: int) -> str:
    return f"{n:,}"


def count(n: int) -> str:
    """A capped count (``store.COUNT_CAP``): ``10,000+`` once it reaches the cap."""
    return f"{COUNT_CAP:,}+" if n >= COUNT_CAP else f"{n:,}"


class Dashboard:
    """The settings, the backend and the template environment of one app."""

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend
        self.env = Environment(
            loader=PackageLoader("outbox.dashboard", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
        )
        self.env.filters.update(
            ms_time=ms_time, duration=duration, number=number, count=count, tick=tick,
            own_due=own_due_ms,
        )
        self.env.globals.update(job_state=job_state, waits_for_turn=waits_for_turn)

    def viewer(self, request: Request) -> auth.Viewer:
        return auth.viewer(request, self.settings.token)

    def show_private(self, who: auth.Viewer) -> bool:
        """Payloads and exception messages: started with --show-payloads AND signed in."""
        return self.settings.show_payloads and who.can_act

    def render(self, request: Request, template: str, status: int = 200, **ctx: Any) -> Response:
        who = self.viewer(request)
        flash = request.session.pop("flash", None) if who.writable else None
        html = self.env.get_template(template).render(
            base=base(request),
            viewer=who,
            settings=self.settings,
            flash=flash,
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def answer(self, request: Request, status: int, message: str) -> Response:
        """An error as an HTML page for browsers, JSON for scripts."""
        headers = {"WWW-Authenticate": 'Bearer realm="outbox"'} if status == 401 else None
        if not wants_html(request):
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        html = self.env.get_template("error.html").render(
            base=base(request),
            viewer=auth.Viewer("anonymous", self.settings.token is not None, ""),
            settings=self.settings,
            flash=None,
            status=status,
            message=message,
            title=f"{status}",
        )
        return HTMLResponse(html, status_code=status, headers=headers)

    def done(self, request: Request, who: auth.Viewer, form: dict[str, list[str]],
             message: str, data: dict[str, Any]) -> Response:
        """A successful action: back to the page for browsers (with a note), JSON for scripts."""
        self.backend.forget_overview()
        log.info("dashboard.action", via=who.via, **data)
        if who.via == "bearer" or not wants_html(request):
            return JSONResponse(data)
        request.session["flash"] = message
        return RedirectResponse(safe_next(request, form), status_code=303)


def base(request: Request) -> str:
    """The path the app is mounted at ("" at the root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def wants_html(request: Request) -> bool:
    return "authorization" not in request.headers and "text/html" in request.headers.get(
        "accept", ""
    )


def safe_next(request: Request, form: dict[str, list[str]]) -> str:
    """Where to go after an action: a path of this dashboard, never another site."""
    root = base(request)
    wanted = (form.get("next") or [""])[0]
    if wanted.startswith(root + "/") and not wanted.startswith("//") and "\\" not in wanted:
        return wanted
    return root + "/"


async def read_form(request: Request) -> dict[str, list[str]]:
    """An urlencoded form body (what browsers and ``curl -d`` send)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Problem(415, "send the form as application/x-www-form-urlencoded")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Problem(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=1000)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Problem(400, "the form is not valid urlencoded UTF-8") from exc
