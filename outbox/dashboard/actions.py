"""The actions: retry and forget dead letters, retry quarantined intents, pause and
resume a queue, sign in and out.

Each one checks who asks (``auth.require_actor``: 401/403, never a redirect) and every
id or queue name it is given before it changes anything, then calls the same admin
function as the CLI (``outbox queue pause/resume`` for a queue). A form carries
either ``one`` (a row's own button) or any number of ``id`` (the ticked rows); dead
letters also take ``all=1``; pause and resume name the queue in the path.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from outbox.dashboard import auth
from outbox.dashboard.web import Dashboard, Problem, base, read_form
from outbox.db.connection import Connection
from outbox.errors import InvalidJob, MessageNotFound, RetryRefused
from outbox.queue import admin as queue_admin
from outbox.queue import control
from outbox.relay import admin as relay_admin

MAX_IDS = 500


def chosen_ids(form: dict[str, list[str]]) -> list[str]:
    """The message ids the form names, all checked before any is acted on."""
    ids = form.get("one") or form.get("id") or []
    if not ids:
        raise Problem(400, "no message id given: tick at least one row")
    if len(ids) > MAX_IDS:
        raise Problem(400, f"at most {MAX_IDS} ids per action")
    return list(dict.fromkeys(queue_admin.check_message_id(i) for i in ids))


async def _actor(dash: Dashboard, request: Request) -> tuple[auth.Viewer, dict[str, list[str]]]:
    """Who acts and what they sent; refused (401/403) before the body is even read."""
    who = auth.require_actor(request, dash.settings.token)
    form = await read_form(request)
    if who.via == "session":
        auth.check_csrf(who, form)
    return who, form


async def retry_dead(dash: Dashboard, request: Request) -> Response:
    who, form = await _actor(dash, request)
    if (form.get("all") or [""])[0] == "1":
        n = await dash.backend.call(queue_admin.retry_all)
        return dash.done(request, who, form, f"requeued {n:,} dead letter(s)",
                         {"action": "retry_dead", "requeued": n})
    ids = chosen_ids(form)

    def run(conn: Connection) -> int:
        return sum(queue_admin.retry(conn, i) for i in ids)

    n = await dash.backend.call(run)
    return dash.done(request, who, form, f"requeued {n} of {len(ids)} dead letter(s)",
                     {"action": "retry_dead", "requeued": n, "asked": len(ids)})


async def forget_dead(dash: Dashboard, request: Request) -> Response:
    who, form = await _actor(dash, request)
    ids = chosen_ids(form)

    def run(conn: Connection) -> int:
        return sum(queue_admin.forget(conn, i) for i in ids)

    n = await dash.backend.call(run)
    return dash.done(request, who, form, f"forgot {n} of {len(ids)} dead letter(s)",
                     {"action": "forget_dead", "forgotten": n, "asked": len(ids)})


async def retry_quarantined(dash: Dashboard, request: Request) -> Response:
    """Re-verify each intent; one that still fails verification is reported, not forced."""
    who, form = await _actor(dash, request)
    ids = chosen_ids(form)

    def run(conn: Connection) -> tuple[int, list[str]]:
        done, refused = 0, []
        for i in ids:
            try:
                relay_admin.retry(conn, i)
                done += 1
            except (RetryRefused, MessageNotFound) as exc:
                refused.append(str(exc))
        return done, refused

    n, refused = await dash.backend.call(run)
    note = f"returned {n} of {len(ids)} intent(s) to pending"
    if refused:
        note += "; refused: " + "; ".join(refused[:3]) + (" ..." if len(refused) > 3 else "")
    return dash.done(request, who, form, note,
                     {"action": "retry_quarantined", "requeued": n, "refused": len(refused)})


def _queue_name(request: Request) -> str:
    """The queue in the path, checked as ``outbox queue pause`` checks it (400 if bad)."""
    try:
        return control.check_queue_name(request.path_params["queue"])
    except InvalidJob as exc:
        raise Problem(400, str(exc)) from None


async def pause_queue(dash: Dashboard, request: Request) -> Response:
    """Stop workers claiming from the queue; running jobs finish. Pausing twice is fine."""
    who, form = await _actor(dash, request)
    name = _queue_name(request)
    await dash.backend.call(lambda conn: control.pause(conn, name))
    return dash.done(request, who, form, f"paused queue {name}",
                     {"action": "pause_queue", "queue": name})


async def resume_queue(dash: Dashboard, request: Request) -> Response:
    who, form = await _actor(dash, request)
    name = _queue_name(request)
    resumed = await dash.backend.call(lambda conn: control.resume(conn, name))
    note = f"resumed queue {name}" if resumed else f"queue {name} was not paused"
    return dash.done(request, who, form, note,
                     {"action": "resume_queue", "queue": name, "resumed": resumed})


async def login(dash: Dashboard, request: Request) -> Response:
    if dash.settings.token is None:
        raise auth.Refused(403, "read-only: this dashboard runs without OUTBOX_DASHBOARD_TOKEN")
    form = await read_form(request)
    try:
        auth.sign_in(request, dash.settings.token, form)
    except auth.Refused as refused:
        if refused.status != 401:
            raise
        return dash.render(request, "login.html", status=401, title="Sign in",
                           error="That is not the dashboard's token.")
    return RedirectResponse(base(request) + "/", status_code=303)


async def logout(dash: Dashboard, request: Request) -> Response:
    form = await read_form(request)
    auth.sign_out(request, dash.settings.token, form)
    return RedirectResponse(base(request) + "/", status_code=303)
