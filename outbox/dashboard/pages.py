"""The pages: overview (live), queue (with its paused state), job, dead letters,
quarantined intents, schedules, sign-in.

Every read goes through ``outbox.queue.admin``, ``outbox.relay.admin`` or
``outbox.dashboard.store``. Payloads and exception messages appear only for a signed-in
operator of a dashboard started with ``--show-payloads``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from outbox import status as outbox_status
from outbox.dashboard import chart, store
from outbox.dashboard import schedules as schedule_reads
from outbox.dashboard.backend import Overview
from outbox.dashboard.web import Dashboard, Problem
from outbox.db.connection import Connection
from outbox.job import sealing
from outbox.queue import admin as queue_admin
from outbox.queue import control
from outbox.queue.throughput import FLUSH_EVERY_S
from outbox.relay import admin as relay_admin

LIST_LIMIT = 100
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One row of the overview's queue table: its counts, its hour, and whether queue
    control paused it (no worker claims from it until it is resumed)."""

    name: str
    counts: store.QueueCounts
    hour: store.Minute  # what workers settled in the chart's hour
    paused: bool = False


def queue_rows(view: Overview) -> list[QueueRow]:
    """Every queue with jobs or dead letters, every queue that ran jobs this hour, and
    every paused queue (one paused before its first job still shows, to be resumed)."""
    per_queue = view.throughput.per_queue
    names = sorted(set(view.counts.queues) | set(per_queue) | view.paused)
    return [
        QueueRow(
            name,
            view.counts.queues.get(name, store.QueueCounts()),
            per_queue.get(name, store.Minute(0)),
            name in view.paused,
        )
        for name in names
    ]


def _overview_context(view: Overview) -> dict[str, Any]:
    rows = queue_rows(view)
    peak = max(
        (r.counts.ready + r.counts.delayed + r.counts.reserved + r.counts.dead for r in rows),
        default=0,
    )
    return {
        "outbox": view.counts,
        "queues": rows,
        "queue_peak": max(peak, 1),
        "chart": chart.build(view.minutes),
        "flush_s": FLUSH_EVERY_S,
    }


async def overview(dash: Dashboard, request: Request) -> Response:
    view = await dash.backend.call_overview()
    return dash.render(request, "overview.html", title="Overview", **_overview_context(view))


async def live(dash: Dashboard, request: Request) -> Response:
    """The overview's changing part, fetched by the page every few seconds."""
    view = await dash.backend.call_overview()
    return dash.render(request, "_live.html", **_overview_context(view))


async def api_status(dash: Dashboard, request: Request) -> Response:
    """The overview's counts (capped, as the page shows them) and the chart's minutes."""
    dash.viewer(request)  # a wrong bearer token is refused here too
    view = await dash.backend.call_overview()
    data = view.counts.as_dict()
    data["paused"] = sorted(view.paused)
    data["throughput"] = [asdict(m) for m in view.minutes]
    data["throughput_per_queue"] = {
        name: {k: v for k, v in asdict(m).items() if k != "start_ms"}
        for name, m in sorted(view.throughput.per_queue.items())
    }
    return JSONResponse(data)


async def queue(dash: Dashboard, request: Request) -> Response:
    name = request.path_params["queue"]
    state = request.query_params.get("state", "ready")
    if state not in store.JOB_STATES:
        raise Problem(400, f"state must be one of {', '.join(store.JOB_STATES)}")
    job_name = request.query_params.get("job") or None
    try:
        cursor = store.Cursor.decode(request.query_params.get("after"))
    except ValueError as exc:
        raise Problem(400, str(exc)) from None
    store.check_job_name(job_name)
    queue_admin.check_queue(name)

    def read(conn: Connection) -> tuple[store.JobPage, int, bool]:
        page = store.job_page(conn, name, state, job_name=job_name,
                              cursor=cursor, limit=PAGE_SIZE)
        # Read now, not from the overview's cache: the page's button must match the state.
        return page, conn.driver.clock_now(), name in control.paused(conn)

    page, now, paused = await dash.backend.call(read)
    view = await dash.backend.call_overview()
    counts = view.counts.queues.get(name, store.QueueCounts())
    return dash.render(
        request, "queue.html", title=f"Queue {name}", queue=name, state=state,
        job_name=job_name or "", page=page, counts=counts, now_ms=now,
        paused=paused,
        first_page=request.query_params.get("after") is None,
    )


async def job(dash: Dashboard, request: Request) -> Response:
    """One message by id, wherever it is now: in the queue, dead-lettered, or an intent
    still in the outbox (pending or quarantined: one handed off has left it)."""
    message_id = queue_admin.check_message_id(request.path_params["message_id"])
    private = dash.show_private(dash.viewer(request))

    def read(conn: Connection) -> dict[str, Any]:
        found: dict[str, Any] = {
            "job": store.job(conn, message_id),
            "dead": queue_admin.failed_job(conn, message_id),
            "intent": store.intent(conn, message_id),
            "now_ms": conn.driver.clock_now(),
            "payload": None,
        }
        of: store.PayloadOf | None = (
            "job" if found["job"] else "dead" if found["dead"] else
            "intent" if found["intent"] else None
        )
        raw = store.payload(conn, of, message_id) if of else None
        # "encrypted (key k1, 312 bytes)" for every viewer (no secret in it); the text
        # itself only for a private view, opened when this process has the key.
        found["sealed"] = sealing.describe(raw)
        dead = found["dead"]
        found["dead_message"] = None if dead is None else sealing.readable(dead.exception_message)
        found["dead_trace"] = None if dead is None else sealing.readable(dead.exception_trace)
        if private:
            found["payload"] = sealing.readable(raw)
        return found

    found = await dash.backend.call(read)
    if not (found["job"] or found["dead"] or found["intent"]):
        raise Problem(404, f"no job, dead letter or intent with message id {message_id}")
    return dash.render(request, "job.html", title=f"Job {message_id}", message_id=message_id,
                       private=private, **found)


async def dead_letters(dash: Dashboard, request: Request) -> Response:
    def read(conn: Connection) -> tuple[list[queue_admin.FailedRow], int, Any]:
        total = sum(q.dead for q in dash.backend.overview().counts.queues.values())
        ordering = outbox_status.ordering_counts(conn)  # the keys dead letters block
        return queue_admin.failed(conn, limit=LIST_LIMIT), total, ordering

    rows, total, ordering = await dash.backend.call(read)
    return dash.render(request, "dead_letters.html", title="Dead letters", rows=rows,
                       total=total, limit=LIST_LIMIT, ordering=ordering)


async def quarantined(dash: Dashboard, request: Request) -> Response:
    def read(conn: Connection) -> tuple[list[relay_admin.FailedIntent], int]:
        total = dash.backend.overview().counts.failed
        return relay_admin.failed(conn, limit=LIST_LIMIT), total

    rows, total = await dash.backend.call(read)
    return dash.render(request, "quarantined.html", title="Quarantined intents", rows=rows,
                       total=total, limit=LIST_LIMIT)


async def schedules(dash: Dashboard, request: Request) -> Response:
    """The registry's periodic jobs (``outbox dashboard --app``); without one, how to give it."""
    registry = dash.settings.registry
    if registry is None:
        return dash.render(request, "schedules.html", title="Schedules", schedules=None)

    def read(conn: Connection) -> tuple[Any, list[schedule_reads.Schedule]]:
        return schedule_reads.read(conn, registry)

    now, rows = await dash.backend.call(read)
    return dash.render(request, "schedules.html", title="Schedules", schedules=rows, now=now,
                       recent=schedule_reads.RECENT)


async def login_page(dash: Dashboard, request: Request) -> Response:
    if dash.settings.token is None:
        raise Problem(403, "read-only: this dashboard runs without OUTBOX_DASHBOARD_TOKEN")
    return dash.render(request, "login.html", title="Sign in", error=None)
