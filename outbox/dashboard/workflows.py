"""The dashboard's workflow pages: the newest workflows, and one workflow's nodes with
their states (``outbox.workflows``). Read-only; never a payload or an exception message
(a dead node links to its job page, which shows what the viewer may see)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from outbox import workflows
from outbox.dashboard.web import Dashboard, Problem
from outbox.db.connection import Connection
from outbox.queue import admin as queue_admin

LIST_LIMIT = 100


async def workflow_list(dash: Dashboard, request: Request) -> Response:
    def read(conn: Connection) -> list[workflows.WorkflowSummary]:
        return workflows.recent(conn, LIST_LIMIT)

    rows = await dash.backend.call(read)
    return dash.render(request, "workflows.html", title="Workflows", rows=rows,
                       limit=LIST_LIMIT)


async def workflow(dash: Dashboard, request: Request) -> Response:
    workflow_id = queue_admin.check_message_id(request.path_params["workflow_id"])

    def read(conn: Connection) -> workflows.WorkflowState | None:
        return workflows.get(conn, workflow_id)

    found = await dash.backend.call(read)
    if found is None:
        raise Problem(404, f"no workflow {workflow_id} (never recorded, or pruned)")
    return dash.render(request, "workflow.html", title=f"Workflow {found.name}", wf=found)
